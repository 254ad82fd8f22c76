"""The vocabulary of the training recipes: a paper's experiment (corpus, directions, the paper's
optimisation and decoding settings) and its methods (model flags), written once as fairseq
config groups. Both the ``fairseq-train`` command lines and the ``fairseq-hydra-train`` yaml are
generated from these objects (``experiment_plan``), so the two cannot disagree.

A config is a dict of fairseq's hydra groups (``common``, ``task``, ``model``, ``criterion``,
``optimizer``, ``lr_scheduler``, ``optimization``, ``dataset``, ``checkpoint``,
``distributed_training``) holding fairseq's own option names (``max_tokens``, ``clsr_budget``...);
``_name`` is the task/arch/criterion/optimizer/scheduler name.
"""

import copy
import math
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

GROUPS = ("common", "task", "model", "criterion", "optimizer", "lr_scheduler", "optimization", "dataset",
          "checkpoint", "distributed_training")
# model options that fix a network's size: dropped by --tiny unless the method's tiny flags set them
SIZE_KEYS = {f"{side}_{key}" for side in ("encoder", "decoder")
             for key in ("layers", "embed_dim", "ffn_embed_dim", "attention_heads")}
DIRECTIONS = ("o2m", "m2o", "all", "lsl-zero-shot")
# LSL paper, section 4.5 (zero-shot): training keeps English directions and directions inside a group
LSL_GROUPS = {"de": "european", "en": "european", "es": "european", "fr": "european", "it": "european",
              "pt": "european", "zh": "cjk", "ja": "cjk", "ko": "cjk", "sw": "sw"}
TINY_MAX_UPDATE = 2


def merge(*configs):
    """Group-wise merge of config dicts; later ones win; a value of None removes the key."""
    out = {}
    for cfg in configs:
        for group, values in (cfg or {}).items():
            if group not in GROUPS:
                raise ValueError(f"unknown config group {group!r}; use one of {', '.join(GROUPS)}")
            target = out.setdefault(group, {})
            for key, value in values.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = copy.deepcopy(value)
    return out


@dataclass(frozen=True)
class Batch:
    """The paper's global batch per update, split over ``gpus`` devices and ``--update-freq``."""
    size: int                 # tokens (unit="tokens") or sentences (unit="sentences") per update
    unit: str = "tokens"
    per_gpu_cap: int = 8192   # the most one device takes per forward pass
    source: str = ""          # where the paper states it

    def flags(self, gpus: int) -> Dict[str, dict]:
        """dataset.max_tokens or dataset.batch_size, and optimization.update_freq, for ``gpus`` devices."""
        if gpus < 1:
            raise ValueError(f"--gpus {gpus}: give the number of devices of the run (>= 1)")
        update_freq = max(1, math.ceil(self.size / (self.per_gpu_cap * gpus)))
        per_gpu = math.ceil(self.size / (update_freq * gpus))
        key = "max_tokens" if self.unit == "tokens" else "batch_size"
        return {"dataset": {key: per_gpu}, "optimization": {"update_freq": update_freq}}


@dataclass(frozen=True)
class Evaluation:
    """How the paper decodes and scores (``langshare evaluate`` / ``langshare compare`` options)."""
    beam: int
    lenpen: float
    metrics: Tuple[str, ...] = ("bleu", "chrf")
    high_threshold: int = 10000   # evaluate: high when train pairs >= this
    low_threshold: int = 2000     # evaluate: low when train pairs < this
    zero_shot: bool = False       # also score the corpus's untrained test directions
    by_direction: bool = False    # also score O2M, M2O and zero-shot directions separately (M2M runs)
    average_last: int = 1         # average the last N update checkpoints (1: checkpoint_last.pt)
    bleu_tokenize: str = "auto"   # evaluate --bleu-tokenize (CLSR: 13a for every direction)
    spbleu_tokenize: str = "auto"  # evaluate --spbleu-tokenize (LSL: flores101)
    win_metric: str = "bleu"      # evaluate --win-metric (LSL reports chrF)
    source: str = ""


@dataclass(frozen=True)
class Method:
    """One row of a paper's table: the model (paper size) and what changes for --tiny."""
    name: str
    model: dict
    reproduces: str
    tiny: dict = field(default_factory=dict)       # model keys for --tiny; "_name" defaults to <arch>_tiny
    config: dict = field(default_factory=dict)     # other groups this method changes (e.g. lr)
    init_from: Optional[str] = None                # method whose final checkpoint this one starts from ...
    init_key: Optional[str] = None                 # ... passed as this model option
    max_update: Optional[int] = None               # its own update budget (fine-tuning)
    after: Tuple[str, ...] = ()                    # commands to run after evaluation ({ckpt}, {run})

    def model_config(self, tiny: bool) -> dict:
        if not tiny:
            return dict(self.model)
        model = {k: v for k, v in self.model.items() if k not in SIZE_KEYS}
        model["_name"] = self.tiny.get("_name", f"{self.model['_name']}_tiny")
        model.update({k: v for k, v in self.tiny.items() if k != "_name"})
        return {k: v for k, v in model.items() if v is not None}


@dataclass(frozen=True)
class Experiment:
    """One experiment family of a paper: corpus, trained directions, settings, methods, scoring."""
    name: str
    corpus: str
    direction: str
    reproduces: str
    config: dict
    batch: Batch
    evaluation: Evaluation
    methods: Tuple[Method, ...]
    baseline: str = "baseline"
    save_interval_updates: int = 5000

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"experiment {self.name}: direction {self.direction!r} is not one of {DIRECTIONS}")
        names = [m.name for m in self.methods]
        if "all" in names or len(set(names)) != len(names):
            raise ValueError(f"experiment {self.name}: method names must be unique and not 'all' (it means every method)")
        if self.baseline not in names:
            raise ValueError(f"experiment {self.name}: baseline {self.baseline!r} is not one of its methods")
        for m in self.methods:
            if m.init_from is not None and m.init_from not in names:
                raise ValueError(f"{self.name}/{m.name}: init_from {m.init_from!r} is not a method of the experiment")

    def method(self, name: str) -> Method:
        for m in self.methods:
            if m.name == name:
                return m
        raise ValueError(f"experiment {self.name} has no method {name!r}; choose one of "
                         f"{', '.join(m.name for m in self.methods)} (langshare recipe list)")

    def max_update(self, method: Method) -> int:
        return method.max_update or self.config["optimization"]["max_update"]


@dataclass(frozen=True)
class Paper:
    name: str
    title: str
    paper_file: str
    experiments: Tuple[Experiment, ...]

    def experiment(self, name: str) -> Experiment:
        for e in self.experiments:
            if e.name == name:
                return e
        raise ValueError(f"paper {self.name} has no experiment {name!r}; choose one of "
                         f"{', '.join(e.name for e in self.experiments)} (langshare recipe list)")


def select_pairs(lang_pairs, direction, pivot="en"):
    """The corpus directions an experiment trains on: ``o2m`` pivot->X, ``m2o`` X->pivot, ``all``
    every direction, ``lsl-zero-shot`` the LSL paper's section 4.5 set (English directions and
    directions inside a language group: European, CJK, Swahili)."""
    def base(code):
        return code.split("_")[0].lower()

    pairs = [p for p in lang_pairs if len(p.split("-")) == 2]
    if direction == "o2m":
        return [p for p in pairs if p.split("-")[0] == pivot]
    if direction == "m2o":
        return [p for p in pairs if p.split("-")[1] == pivot]
    if direction == "all":
        return list(pairs)
    if direction == "lsl-zero-shot":
        keep = []
        for p in pairs:
            s, t = p.split("-")
            gs, gt = LSL_GROUPS.get(base(s), base(s)), LSL_GROUPS.get(base(t), base(t))
            if pivot in (s, t) or gs == gt:
                keep.append(p)
        return keep
    raise ValueError(f"unknown direction {direction!r}; use one of {', '.join(DIRECTIONS)}")
