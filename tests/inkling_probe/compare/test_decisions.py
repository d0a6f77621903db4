

def test_a_candidate_id_past_the_scores_is_a_clear_flip_not_a_crash():
    """An expert id the router has no score for (a broken id map) is a clear-margin change; it used
    to index past the scores (IndexError, exit 3)."""
    import numpy as np

    from inkling_probe.compare.decisions import classify

    scores = np.array([[3.0, 2.0, 1.0, 0.0]] * 3)
    ref = np.array([[0, 1]] * 3)
    cand = ref.copy()
    cand[1] = [0, 7]
    d = classify(ref, cand, scores, scores)
    assert d.changed == [1] and d.clear == [1] and not d.near_tie and not d.unclassified
