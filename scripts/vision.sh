#!/usr/bin/env bash
# Vision training on an image folder end to end: generate a small class-patterned ImageFolder
# (scripts/make_image_folder.py, Debian's python3-pil), prepare it into encoded shards
# (`cadre data prepare --images`), train a small ResNet on it (configs/resnet_imagefolder_small.yaml)
# with 2 DDP workers, each decoding and augmenting with 2 threads, and print the validation
# accuracy reached. Called by `make vision` after setup and build. A rerun resumes (and finds
# the run finished).
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cadre="$build/bin/cadre"
run=runs/vision

if [[ ! -f data/vision/manifest.json ]]; then
  /usr/bin/python3 scripts/make_image_folder.py --out data/vision_folder --classes 8 --per-class 100
  "$cadre" data prepare --images --input data/vision_folder --out data/vision --val-fraction 0.2
fi
"$cadre" run --nproc-per-node 2 --log-dir "$run/logs" -- \
  "$cadre" train --config configs/resnet_imagefolder_small.yaml --resume auto \
  --set data.dir=data/vision --set run.dir=$run
acc=$(/usr/bin/python3 -c "
import json, sys
rows = [json.loads(l) for l in open('$run/metrics.jsonl') if 'val_accuracy' in l]
print(f\"{rows[-1]['val_accuracy']:.3f}\" if rows else 'none')")
echo
echo "vision done: validation accuracy $acc (8 classes, chance 0.125)"
echo "  data        data/vision_folder (generated JPEG/PNG folder), data/vision (encoded shards)"
echo "  run         $run (config.yaml, metrics.jsonl with val_accuracy, summary.json)"
