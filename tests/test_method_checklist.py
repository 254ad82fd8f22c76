"""docs/architecture.md's checklist for a new method, where a test can hold it: every language-aware
model the plugin registers has its presets, is in the lists the shared tests parametrise over (so the
mixed-precision, GPU, distributed and option-sweep tests run it too) and has its documentation.
A method added without them is named here, with the list to add it to."""

import re
from pathlib import Path

from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

import fairseq_langshare
from fairseq_langshare.models.language_aware_transformer import LanguageAwareTransformerModel
from method_configs import METHODS
from option_sweep import ARCHS
from test_docs_claims import METHOD_PAGES

ROOT = Path(__file__).resolve().parents[1]


def methods():
    """The registered language-aware models of the plugin (not the single-pair models export writes)."""
    return sorted(name for name, cls in MODEL_REGISTRY.items()
                  if cls.__module__.startswith(fairseq_langshare.__name__)
                  and issubclass(cls, LanguageAwareTransformerModel))


def test_the_checklist_sees_every_method():
    assert len(methods()) >= 7 and "langshare_transformer" in methods()


def test_every_method_has_small_and_tiny_presets():
    missing = [f"{name}{suffix}" for name in methods() for suffix in ("_small", "_tiny")
               if ARCH_MODEL_REGISTRY.get(f"{name}{suffix}") is not MODEL_REGISTRY[name]]
    assert missing == [], "register_model_architecture these presets (docs/architecture.md, 'Model')"


def _arch(flags):
    return flags[flags.index("--arch") + 1].format(size="tiny")


def test_every_method_is_in_the_shared_test_lists():
    from benchmarks import data_parallel_steps
    from test_activation_checkpointing import ACCEPTING, ARCH, REFUSING

    checkpointing = {METHODS[ARCH.get(m, m)][1] for m in [*ACCEPTING, *(m for m, _ in REFUSING)]}
    lists = (("tests/method_configs.py METHODS (and AUX_LOSSES if it reports losses)",
              {_arch(flags) for flags in METHODS.values()}),
             ("tests/option_sweep.py ARCHS", ARCHS),
             ("tests/test_activation_checkpointing.py ACCEPTING (or REFUSING, with the refusal)", checkpointing),
             ("benchmarks/data_parallel_steps.py METHODS (2 ranks = 1 process)",
              {_arch(flags) for flags in data_parallel_steps.METHODS.values()}))
    missing = [f"{name}_tiny: add it to {where}" for name in methods() for where, listed in lists
               if f"{name}_tiny" not in listed]
    assert missing == [], "\n".join(missing)


def test_every_method_is_documented():
    pages = {page: (ROOT / "docs" / page).read_text() for page in METHOD_PAGES}
    readme = (ROOT / "README.md").read_text()
    missing = []
    for name in methods():
        if f"`{name}`" not in readme:
            missing.append(f"{name}: a row in README.md's Methods table")
        if not any(re.search(rf"`{name}[`\[]", text) for text in pages.values()):
            missing.append(f"{name}: a docs/<method>.md page naming `{name}`, listed in tests/test_docs_claims.py "
                           "METHOD_PAGES")
    assert missing == []
