"""Task definitions for lm-evaluation-harness over local files: its own GSM8K tasks fetch their data
from a hub these machines cannot reach, so these read GSM8K items from the installed package.

- `pardec_gsm8k` (generate_until): the question, decoded to "####" and the number after it, scored by
  exact match of that number.
- `pardec_gsm8k_choice` (multiple_choice, log-likelihood): the right answer against three wrong
  numbers near it, scored by which continuation the model finds likeliest.

`write(folder, limit)` writes `gsm8k.jsonl` and the two YAMLs there; run them with
`lm_eval --include_path folder --tasks pardec_gsm8k,pardec_gsm8k_choice ...`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from . import gsm8k

GENERATE = """task: pardec_gsm8k
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{target}}}}"
generation_kwargs:
  until: ["Question:", "\\n\\n\\n"]
  max_gen_toks: {max_gen_toks}
  do_sample: false
filter_list:
  - name: final-number
    filter:
      - function: regex
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_punctuation: true
metadata:
  version: 1.0
"""

CHOICE = """task: pardec_gsm8k_choice
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer: the final answer is"
doc_to_choice: choices
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def _choices(target: str, rng: random.Random) -> tuple[list[str], int]:
    """The right number among three wrong ones near it, in a seeded order."""
    value = float(target.replace(",", ""))
    step = max(1, round(abs(value) * 0.1))
    wrong = [value + d * step for d in (-2, -1, 1, 2)]
    rng.shuffle(wrong)
    options = [value] + wrong[:3]
    rng.shuffle(options)
    text = [" " + (str(int(o)) if float(o).is_integer() else str(o)) for o in options]
    return text, options.index(value)


def write(folder: str | Path, limit: int = 50, max_gen_toks: int = 256, seed: int = 0) -> list[Path]:
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    rows = []
    for r in gsm8k.rows()[:limit]:
        target = r["answer"].split("####")[-1].strip()
        choices, label = _choices(target, rng)
        rows.append({"question": r["question"], "target": target, "choices": choices, "label": label})
    data = folder / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    paths = [data]
    for name, template in (("pardec_gsm8k.yaml", GENERATE), ("pardec_gsm8k_choice.yaml", CHOICE)):
        paths.append(folder / name)
        paths[-1].write_text(template.format(data=data, max_gen_toks=max_gen_toks))
    return paths
