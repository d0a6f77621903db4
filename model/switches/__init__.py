"""The switches inkling_model's own code reads while it computes: planted faults (:mod:`.faults`),
the per-layer reference precision of NVFP4 experts (:mod:`.precision`), forced routing
(:mod:`.forced_routing`) and teacher-forced decode tokens (:mod:`.forced_tokens`). Leaves: they
import nothing of the model, so the layers, the all-reduce, the weight mapper and the generation
loop consult them from below; the plug-ins (``plugins/``: toggles, the repro's
variables) describe them to the toolkit from above."""
