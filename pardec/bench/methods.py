"""The methods of a bench run: `--methods` parsing, and a runner per method behind one interface.

`hf` (transformers' own `generate`, greedy) is a runner like the others: a reference for pardec's
AR loop; `llamacpp` (llama.cpp on the model's own GGUF, greedy) is the baseline a local user would run.
A method may carry an adapter of its own (`spec@adapter=PATH`), decoded with that model, and a dtype of
its own (`spec@dtype=float32`): where a CPU emulates bf16, compiled float32 steps can beat bf16 ones, and
only a run holding both says by how much.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..api import configure
from ..decoding import METHODS, DecodeConfig, decode
from ..errors import PardecError
from ..model import LoadedModel
from ..model.loading import no_compile
from ..model.quant import CHOICES
from ..model.quant import parse as parse_quant

HF = "hf"
LLAMACPP = "llamacpp"
EXTERNAL = (HF, LLAMACPP)  # greedy decoders that are not pardec's loop
# The value after `method@` without a name sets this setting.
AUTO = ("threshold", "gamma")  # settings that take "auto": the value `pardec calibrate` saved
DTYPES = ("float32", "bfloat16")  # a method's own @dtype=
PRIMARY = {"threshold": "threshold", "eb": "gamma", "spec": "block_size", "dflash": "block_size"}


@dataclass(frozen=True)
class MethodSpec:
    label: str  # as given, e.g. "threshold@0.7"
    config: DecodeConfig
    adapter: str | None = None  # a checkpoint folder of its own (spec@adapter=PATH); None: the run's model
    quant: str = "none"  # its model's weight-only quantization (ar@quant=int8)
    compile: bool = False  # its steps through torch.compile (spec@compile=true; model/compiled.py)
    dtype: str | None = None  # its model's dtype (spec@dtype=float32); None: the run's --dtype
    sets: frozenset[str] = frozenset()  # the DecodeConfig fields the label sets (no trained D overrides them)
    external: str | None = None  # "hf" or "llamacpp" instead of pardec's loop


def parse_methods(text: str, base: DecodeConfig, default_quant: str = "none") -> list[MethodSpec]:
    """'ar,threshold@0.9,eb@gamma=0.5,spec@block_size=8@temperature=0' -> specs; `ar` is added first
    if missing, since every speedup is relative to it. `@adapter=PATH` gives a method an adapter of
    its own, to compare adapters against the same `ar` in one run. `default_quant`: the quantization of
    every method of pardec's loop without a `@quant=` of its own (`ar` included)."""
    if default_quant not in CHOICES:
        raise PardecError(f"unknown quantization '{default_quant}': one of {', '.join(CHOICES)}")
    specs = []
    fields = {f.name: f.type for f in dataclasses.fields(DecodeConfig)}
    ints = {name for name, kind in fields.items() if str(kind).startswith("int")}
    bools = {name for name, kind in fields.items() if str(kind) == "bool"}  # the rest are floats
    names = (*METHODS, *EXTERNAL)
    for label in [t.strip() for t in text.split(",") if t.strip()]:
        name, *settings = label.split("@")
        if name not in names:
            raise PardecError(f"unknown method '{name}' in --methods: choose from {', '.join(names)}")
        own_model = name in EXTERNAL or METHODS[name].own_model  # llamacpp, hf, dflash: not ours to quantize
        kw, adapter, quant, compiled = {}, None, "none" if own_model else default_quant, False
        dtype = None
        for s in settings:
            if s.startswith("dtype="):
                dtype = s.partition("=")[2]
                if dtype not in DTYPES or (own_model and name != HF):  # hf decodes the loaded model too
                    raise PardecError(f"bad setting '{s}' in '{label}': dtype= takes {' or '.join(DTYPES)}")
                continue
            if s.startswith("compile="):
                value = s.partition("=")[2]
                if value not in ("0", "1", "true", "false") or own_model:
                    raise PardecError(f"bad setting '{s}' in '{label}': compile= takes true or false")
                compiled = value in ("1", "true")
                continue
            if s.startswith("quant="):
                quant = s.partition("=")[2]
                if quant not in CHOICES or own_model:
                    raise PardecError(f"bad setting '{s}' in '{label}': quant= takes {', '.join(CHOICES)}")
                continue
            if s.startswith("adapter="):
                adapter = s.partition("=")[2]
                if not adapter or own_model:
                    own = ", ".join(m for m, v in METHODS.items() if not v.own_model)
                    raise PardecError(f"bad setting '{s}' in '{label}': adapter=PATH applies to {own}")
                continue
            if name == LLAMACPP:
                raise PardecError(
                    f"bad setting '{s}' in '{label}': llamacpp takes none (greedy, the GGUF as shipped)"
                )
            key, _, value = s.rpartition("=")
            key = key.replace("-", "_") or PRIMARY.get(name)
            if key is None or key not in fields or key in ("method", "stop"):
                raise PardecError(f"bad setting '{s}' in '{label}'")
            try:
                if key in bools and value not in ("0", "1", "true", "false"):
                    raise ValueError(value)
                if key in AUTO and value == "auto":
                    kw[key] = None  # the adapter's calibrated value (api.configure)
                else:
                    kw[key] = (
                        value in ("1", "true")
                        if key in bools
                        else int(value)
                        if key in ints
                        else float(value)
                    )
            except ValueError:
                raise PardecError(f"bad value '{value}' in '{label}'") from None
        method = "ar" if name in EXTERNAL else name
        specs.append(
            MethodSpec(
                label,
                dataclasses.replace(base, method=method, **kw),
                adapter,
                quant,
                compiled,
                dtype,
                frozenset(kw),
                external=name if name in EXTERNAL else None,
            )  # fmt: skip
        )
    for s in specs:
        if s.compile and (refusal := no_compile(parse_quant(s.quant)[0])):
            raise PardecError(refusal)
    if not any(s.label == "ar" for s in specs):
        specs.insert(0, MethodSpec("ar", dataclasses.replace(base, method="ar"), quant=default_quant))
    if len({s.label for s in specs}) != len(specs):
        raise PardecError("--methods lists a method twice")
    return specs


@dataclass(frozen=True)
class Decoded:
    tokens: list[int]
    forwards: int
    steps: list[int]  # tokens committed by each forward
    seconds: float
    fed: list[int] | None = None  # tokens fed by each forward (pending + slots); None: not known (hf)
    # Steps that verified drafts with a predicted reach: [predicted reach of each fed draft, accepted]
    verified: list | None = None


class Runner(Protocol):
    spec: MethodSpec
    lm: LoadedModel  # the model it decodes with (the run's, or the method's own adapter's)

    def run(self, ids: list[int], max_new_tokens: int | None = None) -> Decoded: ...


@dataclass(frozen=True)
class DecodeRunner:
    spec: MethodSpec
    lm: LoadedModel
    config: DecodeConfig  # settled for this model (configure)
    extras: dict[str, Any]

    def run(self, ids, max_new_tokens=None):
        config = (
            self.config
            if max_new_tokens is None
            else dataclasses.replace(self.config, max_new_tokens=max_new_tokens)
        )
        r = decode(self.lm.decoder, [ids], config, self.lm.mask_id, self.lm.stop_ids, extras=self.extras)[0]
        verified = [[list(p), n] for p, n in r.verified_per_step]
        return Decoded(r.tokens, r.forwards, r.accepted_per_step, r.seconds, r.fed_per_step, verified)


@dataclass(frozen=True)
class HFRunner:
    spec: MethodSpec
    lm: LoadedModel

    def run(self, ids, max_new_tokens=None):
        stops = sorted(self.lm.stop_ids)
        t = time.perf_counter()
        out = self.lm.model.generate(
            torch.tensor([ids], device=self.lm.model.device),
            max_new_tokens=max_new_tokens or self.spec.config.max_new_tokens,
            do_sample=False,
            suppress_tokens=[self.lm.mask_id],
            eos_token_id=stops or None,
            pad_token_id=stops[0] if stops else 0,
        )
        tokens = out[0, len(ids) :].tolist()
        return Decoded(tokens, len(tokens), [1] * len(tokens), time.perf_counter() - t)


OwnKey = tuple[str | None, str, str | None]  # (adapter, quant, dtype) of a method's own model


def own_key(s: MethodSpec) -> OwnKey | None:
    """The key of the model a method loads for itself; None where it decodes with the run's."""
    own = s.adapter is not None or s.quant != "none" or s.dtype is not None
    return (s.adapter, s.quant, s.dtype) if own else None


def model_for(s: MethodSpec, lm: LoadedModel, own: dict[OwnKey, LoadedModel]) -> LoadedModel:
    """The model a method decodes with: the run's, or the one loaded for its own adapter, quantization
    and dtype."""
    key = own_key(s)
    return lm if key is None else own[key]


def make_runners(
    lm: LoadedModel,
    specs: list[MethodSpec],
    own: dict[OwnKey, LoadedModel],
    sets_block_size: bool,
    options: dict,
) -> list[Runner]:
    """A runner per spec; `own`: the model loaded for each spec's own adapter, quantization and dtype
    (own_key)."""
    runners: list[Runner] = []
    compiled: dict[int, LoadedModel] = {}  # one compiled variant per model, shared by its methods
    for s in specs:
        model = model_for(s, lm, own)
        if s.compile:
            model = compiled.setdefault(id(model), dataclasses.replace(model, compile=True))
        if s.external == HF:
            runners.append(HFRunner(s, model))
            continue
        if s.external == LLAMACPP:
            from .llamacpp import LlamaCppRunner, open_gguf  # an optional extra

            runners.append(LlamaCppRunner(s, model, open_gguf(model)))
            continue
        config, extras = configure(model, s.config, sets_block_size or "block_size" in s.sets, options)
        runners.append(DecodeRunner(dataclasses.replace(s, config=config), model, config, extras))
    return runners
