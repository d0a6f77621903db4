from inkling_probe.bisect.ddmin import ddmin


def test_finds_a_pair_that_fails_only_together():
    asked = []

    def fails(s):
        asked.append(tuple(s))
        return {"b", "e"} <= set(s)

    assert ddmin(list("abcdef"), fails) == ["b", "e"]
    assert not fails(["b"]) and not fails(["e"])
    first = list(asked)
    asked.clear()
    ddmin(list("abcdef"), fails)
    assert asked[: len(first) - 2] == first[: len(first) - 2]  # the same questions in the same order


def test_single_culprit_and_whole_set():
    assert ddmin([3, 4, 5], lambda s: 4 in s) == [4]
    assert ddmin(list("abc"), lambda s: len(s) == 3) == list("abc")
