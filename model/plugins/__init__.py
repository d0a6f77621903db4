"""What inkling_model plugs into the toolkit with, registered through its entry-point groups: toggles
for ``bisect flags`` (:mod:`.toggles`), the variables a bug report's repro carries
(:mod:`.computation_env`), the standalone repro (:mod:`.standalone`), the replay factory
(:mod:`.replay_factory`) and the generation log (:mod:`.genlog`). They import the model; nothing of
the model imports them. The switches the model's code reads (faults, precision, forced routing) are
the model's own, in ``inkling_model.switches`` (their old ``plugins.`` paths were removed in 0.2.0:
importing one names the new one)."""
