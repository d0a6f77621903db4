#!/usr/bin/env bash
# GPU evidence on the device machine (docs/gpu/): the cuda-marked tests, graphdiff on the clean, the
# planted capture fault and NVFP4, and bisect flags. Run from the repo root there; writes to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
part=${1:-tests}
python3 -m pip install -q --no-deps .whl/*.whl >/dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))"
w=$(mktemp -d)
if [ "$part" = tests ]; then
  python3 -m pytest -q -s -m cuda tests 2>&1 | tee "$OUT/cuda_tests.txt" | tail -40
  inkling-probe make-checkpoint --preset tiny "$w/ck" >/dev/null && inkling-probe make-checkpoint --preset tiny --quant nvfp4 "$w/ckq" >/dev/null
  { for case in clean fault nvfp4; do
      ck=$w/ck; extra=""; [ $case = fault ] && extra="--fault capture_unsafe_allreduce"; [ $case = nvfp4 ] && ck=$w/ckq
      echo "\$ inkling-probe graphdiff --run \"inkling-probe run --ckpt $( [ $case = nvfp4 ] && echo ckq || echo ck ) --tokens 5,77,300,12,9,4 --max-new-tokens 4 --dtype bf16 --cuda-graph --allreduce oneshot $extra --dump {dump}\" --out gd_$case"
      COLUMNS=150 inkling-probe graphdiff --run "inkling-probe run --ckpt $ck --tokens 5,77,300,12,9,4 --max-new-tokens 4 --dtype bf16 --cuda-graph --allreduce oneshot $extra --dump {dump}" --out "$w/gd_$case" 2>&1 | tail -12
      echo "[exit ${PIPESTATUS[0]}]"; echo
    done; } 2>&1 | tee "$OUT/graphdiff.txt"
else
  [ -n "${SKIP_BENCH:-}" ] || python3 scripts/bench_graph.py 2>&1 | tee "$OUT/bench_graph.txt" | tail -30
  inkling-probe make-checkpoint --preset tiny --seed 0 --quant nvfp4 "$w/ck" >/dev/null  # docs/BISECT.md's ck
  cd "$w"
  { export INKLING_CUDA_GRAPH=1
    INKLING_ENFORCE_EAGER=1 inkling-probe run --ckpt ck --tokens 1,17,42,99,7,300,12,5 --max-new-tokens 6 --fault capture_unsafe_allreduce --dump ref >/dev/null
    COLUMNS=150 inkling-probe bisect flags -w bf --model inkling_model --select 'cuda_graph,allreduce' \
      --flag OMP_NUM_THREADS=1:2 --flag NCCL_ALGO=Ring:Tree --flag TOKENIZERS_PARALLELISM=false:true \
      --cmd "inkling-probe run --ckpt ck --tokens 1,17,42,99,7,300,12,5 --max-new-tokens 6 --fault capture_unsafe_allreduce --dump {dump}" \
      --oracle compare:ref; echo "[exit $?]"; } 2>&1 | tee "$OUT/bisect_flags_gpu.txt" | tail -25
fi
