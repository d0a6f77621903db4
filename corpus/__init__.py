"""The localization corpus: planted faults with known culprit keys and benign pairs, on
inkling_model and tiny random transformers models, each compared in several regimes
(docs/COMPARE.md, "Localization corpus"). Run by ``scripts/bench_localize.py`` and, its quick
subset, by tests/inkling_probe/compare/test_corpus.py.

- :mod:`.families` loads the families (one module each: :mod:`.llama`, :mod:`.qwen2_moe`,
  :mod:`.gpt_neox`, :mod:`.inkling`; :mod:`.long_moe`: 512-token MoE prompts in three shapes;
  :mod:`.decode_faults`: decode-only faults through ``generate()``, recorded by :mod:`.decode`);
  :mod:`.bench` selects cases and runs them;
- :mod:`.case`, :mod:`.regimes`: a case, its runs and regimes; :mod:`.plant`, :mod:`.hf`,
  :mod:`.inkling_runs`: recording them (one batch row: ``record(batch_row=)``); :mod:`.dumps`:
  the recorded dumps;
- :mod:`.judge`, :mod:`.report`, :mod:`.sweep`: judging, the table, the sensitivity sweep.
"""
