"""Model tests run single-threaded: on the shared 2-core machine, intra-op threads oversubscribe
(a tiny forward measured 15-30x slower with the default thread count under load)."""
import torch

torch.set_num_threads(1)
