#!/usr/bin/env bash
# The fine-tuning twin of configs/llama2_7b_sft.yaml, small enough for 2 cores (`make finetune`):
# takes the demo's small Llama (training its first chunk first when runs/demo has no checkpoint:
# scripts/demo.sh, about 6 minutes), prepares the instruction set that ships in the repository
# (third_party/data/sotu_instruct: chat and alpaca samples made from the corpus) with the demo's
# tokenizer and Llama 2's chat template, fine-tunes it for 2 epochs with 2 workers (FULL_SHARD),
# learning the answers only, and prints the masked loss on the held-out tenth as it falls; then
# exports it (Hugging Face folder, Llama 2's chat template beside the tokenizer), serves it and
# asks it a question through the official `openai` client. Each run starts the fine-tune over.
# LORA=1 (`make finetune LORA=1`): LoRA instead (rank 16 on every projection, the base frozen),
# in runs/finetune_lora; the adapters are exported as a PEFT folder and, merged into the base, as
# the Hugging Face folder that is served.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cadre="$build/bin/cadre"
venv_python="${CADRE_VENV:-$HOME/.cache/cadre/venv}/bin/python"
run=runs/finetune
data=data/sotu_sft
lora=()
lr=0.0003 min_lr=0.00003
if [[ ${LORA:-0} == 1 ]]; then
  run=runs/finetune_lora
  # Adapters learn from zero (B starts at zero): a higher rate than full fine-tuning, as LoRA recipes use.
  lora=(--set lora.rank=16 --set lora.alpha=32 --set lora.targets=all-linear)
  lr=0.003 min_lr=0.0003
fi

newest_checkpoint() {
  local newest=""
  for d in "$1"/checkpoints/step-*; do [[ -f $d/COMMITTED ]] && newest=$d; done
  echo "$newest"
}

base=$(newest_checkpoint runs/demo)
if [[ -z $base ]]; then
  echo "finetune: runs/demo has no checkpoint; training the demo's first chunk (scripts/demo.sh)"
  DEMO_STEPS=${DEMO_STEPS:-100} bash scripts/demo.sh "$build"
  base=$(newest_checkpoint runs/demo)
fi
echo "finetune: base model $base"

"$cadre" data prepare --input third_party/data/sotu_instruct/sotu_qa.jsonl --tokenizer data/sotu/tokenizer.model \
  --chat-template llama2 --seq-len 128 --val-fraction 0.1 --out "$data"

rm -rf "$run"
"$cadre" run --nproc-per-node 2 --log-dir "$run/logs" -- \
  "$cadre" train --config configs/finetune.yaml --resume none \
  --set train.init_from="$base" --set data.dir="$data" --set run.dir="$run" --set train.epochs=2 \
  --set data.batch_size=8 --set optim.lr=$lr --set optim.min_lr=$min_lr --set optim.warmup_steps=5 \
  --set train.eval_interval=9 --set train.eval_batches=0 --set train.threads=1 --set checkpoint.interval=0 \
  ${lora[@]+"${lora[@]}"}

echo
echo "finetune: masked loss on the held-out samples (answers only), by step:"
/usr/bin/python3 - "$run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
vals = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
for step, loss in vals:
    print(f"  step {step:3d}  val_loss {loss:.4f}")
if len(vals) >= 2 and not vals[-1][1] < vals[0][1]:
    sys.exit("finetune: the held-out loss did not fall")
PY

checkpoint=$(newest_checkpoint "$run")
if [[ ${LORA:-0} == 1 ]]; then
  "$cadre" ckpt export "$checkpoint" --format peft --out "$run/peft"
  echo "finetune: the adapter is $(du -sh "$run/peft" | cut -f1); the run's checkpoint (adapters, their optimizer" \
       "state, no base) $(du -sh "$checkpoint" | cut -f1); the base's $(du -sh "$base" | cut -f1)"
  "$cadre" ckpt export "$checkpoint" --format hf --merge --out "$run/hf" >/dev/null
else
  "$cadre" ckpt export "$checkpoint" --format hf --out "$run/hf" >/dev/null
fi
cp third_party/chat_templates/llama-2-chat.jinja "$run/hf/chat_template.jinja"

# Serve on a free port, ask through the official client, stop the server whatever happens.
log="$run/serve.log"
"$cadre" serve --model "$run/hf" --model-name sotu-chat --host 127.0.0.1 --port 0 >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  grep -q "listening on" "$log" && break
  kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
url=$(grep -o "http://127.0.0.1:[0-9]*" "$log" | head -1)
echo
echo "finetune: served at $url; asking through the openai client:"
"$venv_python" - "$url" <<'PY'
import sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
question = "Who gave the State of the Union address of 1862?"
answer = client.chat.completions.create(model="sotu-chat", messages=[{"role": "user", "content": question}],
                                        max_tokens=24, temperature=0)
print(f"  Q: {question}\n  A: {answer.choices[0].message.content.strip()}")
PY
echo
echo "finetune done:"
echo "  data     $data (manifest.json, token and label shards)"
echo "  run      $run (metrics.jsonl: loss and val_loss over the answers only)"
if [[ ${LORA:-0} == 1 ]]; then
  echo "  adapter  $run/peft (PEFT: adapter_config.json, adapter_model.safetensors)"
  echo "  export   $run/hf (Hugging Face Llama with tokenizer.model and chat_template.jinja, the adapters merged)"
else
  echo "  export   $run/hf (Hugging Face Llama with tokenizer.model and chat_template.jinja)"
fi
echo "  serve it $cadre serve --model $run/hf --port 8000"
