"""How often a model's own greedy choice is the next token of answers in distillation files
(teacher-forced top-1 agreement): whether another model's self-distilled answers are nearly the
model's own. Usage: python agree.py MODEL N FILE.jsonl [FILE.jsonl ...]"""

import json
import sys

import torch

from pardec.model import load_model

ANSWER_TOKENS = 200  # the first tokens of each answer scored


def main() -> None:
    model, n, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    lm = load_model(model, dtype=torch.float32, adapter="none")
    torch.set_grad_enabled(False)
    for path in files:
        rows = [json.loads(line) for line in open(path)]
        rows = rows[:: max(1, len(rows) // n)][:n]  # spread over the file
        hit = total = 0
        for r in rows:
            prompt = lm.encode(r["prompt"], True)
            answer = lm.tokenizer.encode(r["response"], add_special_tokens=False)[:ANSWER_TOKENS]
            ids = torch.tensor([prompt + answer])  # [1, T]
            logits = lm.model(ids).logits[0, len(prompt) - 1 : -1]  # [A, V]: predicts each answer token
            hit += int((logits.argmax(-1) == ids[0, len(prompt) :]).sum())
            total += len(answer)
        print(f"{path}: {len(rows)} answers, {total} tokens, top-1 agreement {hit / total:.3f}", flush=True)


if __name__ == "__main__":
    main()
