"""What inkling_model plugs into the toolkit and the bring-up with: planted faults (:mod:`.faults`),
the reference-precision switch (:mod:`.precision`), toggles for ``bisect flags`` (:mod:`.toggles`),
the standalone repro (:mod:`.standalone`), the replay factory (:mod:`.replay_factory`) and the
generation log (:mod:`.genlog`); registered through the toolkit's entry-point groups."""
