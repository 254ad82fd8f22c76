"""fairseq-hydra-train with a configs/ yaml; the helper that starts 2 gloo ranks by hand (LSL's and
multi-stacks' tests use it; torchrun and srun launches: tests/test_distributed_launch.py); the gloo
group destroyed before the interpreter exits."""

import json
import os
import re
import concurrent.futures
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_corpus import PKG_DIR

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(cmd, cwd, timeout=600):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def updates_logged(output):
    return [int(float(json.loads(line[line.index("{"):])["num_updates"]))
            for line in output.splitlines() if '"num_updates"' in line and "{" in line]


@pytest.mark.parametrize("precision", [[], ["common.bf16=true"]], ids=["fp32", "bf16"])
def test_hydra_train_with_the_demo_config(corpus, tmp_path, precision):
    """bf16 through hydra: fairseq-train's --bf16 also turns on --tpu (fairseq 0.12)."""
    out = run([str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "configs"), "--config-name", "demo",
               f"common.user_dir={PKG_DIR}", "common.log_format=json", "common.log_interval=1",
               f"task.data={corpus['bin']}", "task.langs='en,xx,yy'", "task.lang_pairs='en-xx,en-yy'",
               "model._name=langshare_transformer_tiny", "optimization.max_update=3",
               "dataset.max_tokens=500", f"checkpoint.save_dir={tmp_path / 'ckpt'}",
               "checkpoint.save_interval_updates=0", *precision], cwd=tmp_path)
    assert max(updates_logged(out)) == 3
    assert ("'tpu': False, 'bf16': True" in out) == bool(precision)  # the config it trained with
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def test_hydra_train_multistack_knows_its_directions_and_arch(corpus, tmp_path):
    """Under fairseq-hydra-train the model's options are the model node, without the task's --lang-pairs or an
    ``arch`` key. Was: multi-stacks read the directions from there, found none, and neither warned that 2 of the 3
    encoders never train nor left them out of DDP (fairseq-train does both); and every method stored its class
    name (``MultistackTransformerModel``) as the checkpoint's --arch, which a refused resume then told the user to
    pass."""
    import torch
    from fairseq_langshare.languages import decode_settings

    out = run([str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "configs"), "--config-name", "demo",
               f"common.user_dir={PKG_DIR}", f"task.data={corpus['bin']}", "task.langs='en,xx,yy'",
               "task.lang_pairs='en-xx,en-yy'", "model._name=langshare_multistack_transformer_tiny",
               "+model.multi_encoder=src-lang", "+model.multi_decoder=tgt-lang", "optimization.max_update=1",
               "dataset.max_tokens=500", f"checkpoint.save_dir={tmp_path / 'ckpt'}",
               "checkpoint.save_interval_updates=0"], cwd=tmp_path)
    assert out.count("--multi-encoder src-lang: no training direction of --lang-pairs has a source language in "
                     "xx, yy, so 2 of the 3 encoders never train") == 1, out[-3000:]
    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", weights_only=True)
    assert decode_settings(state["model"]["lang_inventory"])["arch"] == "langshare_multistack_transformer_tiny"


@pytest.mark.parametrize("override,says", [
    ("+task.sampling_temperatur=3", r"task\.sampling_temperatur: no such option of the task \(Key "
                                    r"'sampling_temperatur' not in 'MultilingualLangshareConfig'\): check the key's "
                                    r"spelling"),
    ("task.sampling_temperature=abc", r"task\.sampling_temperature: Value 'abc' (of type 'str' )?could not be "
                                      r"converted to Float: check the value's type"),  # omegaconf 2.0: no type
    ("+criterion.label_smothing=0.1", r"criterion\.label_smothing: no such option of the criterion \(Key "
                                      r"'label_smothing' not in 'LangshareCriterionConfig'\): check the key's "
                                      r"spelling"),
])
def test_a_mistyped_override_of_the_plugins_config_is_one_line(corpus, tmp_path, override, says):
    """Was a 40-frame hydra and omegaconf traceback (the plugin sets HYDRA_FULL_ERROR=1 so that its own refusals
    reach its one-line report; a typo in its task's or criterion's options is the user's too)."""
    cmd = [str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "configs"), "--config-name", "demo",
           f"common.user_dir={PKG_DIR}", f"task.data={corpus['bin']}", "task.langs='en,xx,yy'",
           "task.lang_pairs='en-xx,en-yy'", "model._name=langshare_transformer_tiny", "optimization.max_update=1",
           f"checkpoint.save_dir={tmp_path / 'ckpt'}", override]
    proc = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert re.fullmatch("fairseq-hydra-train: error: " + says, proc.stderr.strip().splitlines()[-1]), proc.stderr[-500:]


@pytest.mark.parametrize("arch,key,value,says", [
    ("lsl_transformer_tiny", "lsl_search", "no", r"model\.lsl_search: 'no' is no switch value: write true or false"),
    ("clsr_transformer_tiny", "clsr_budgett", 0.5, r"model\.clsr_budgett: no such option of clsr_transformer_tiny: "
                                                   r"check the key's spelling"),
    ("clsr_transformer_tiny", "clsr_gate_dim", 2.5, r"model\.clsr_gate_dim: 2\.5 is not an integer"),
    ("langshare_adapter_transformer_tiny", "adapter_bottleneck", "abc",
     r"model\.adapter_bottleneck: 'abc' is not an integer"),
    ("latent_depth_transformer_tiny", "latent_layers", "encoderr",
     r"model\.latent_layers: 'encoderr' is not one of decoder, encoder, both"),
    ("clsr_transformer_tiny", "clsr_budget", "0.5", None),  # a number as a string: the number
])
def test_the_hydra_model_node_is_parsed_as_fairseq_train_parses_flags(arch, key, value, says):
    """fairseq-hydra-train hands a plugin architecture's ``model:`` node unparsed. Was: ``+model.lsl_search=no``
    trained the architecture search (a non-empty string is true), a misspelt key trained with the default, exit
    0; 2.5 layers' worth of gate dimension a TypeError traceback; '0.5' 'outside [0, 1]'."""
    from omegaconf import OmegaConf

    from fairseq_langshare.models.config_transformer import check_model_node

    node = OmegaConf.create({"model": {"_name": arch, "dropout": 0.1, key: value}}).model
    OmegaConf.set_struct(node, True)
    if says is None:
        check_model_node(node)
        assert node[key] == 0.5 and node.dropout == 0.1
        return
    with pytest.raises(ValueError, match=f"^{says}$"):
        check_model_node(node)


def test_hydra_train_refuses_a_misspelt_model_option_in_one_line(corpus, tmp_path):
    """The check above where fairseq-hydra-train runs it (the task's build_model), before anything is trained."""
    cmd = [str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "configs"), "--config-name", "demo",
           f"common.user_dir={PKG_DIR}", f"task.data={corpus['bin']}", "task.langs='en,xx,yy'",
           "task.lang_pairs='en-xx,en-yy'", "model._name=clsr_transformer_tiny", "+model.clsr_budgett=0.5",
           "optimization.max_update=1", f"checkpoint.save_dir={tmp_path / 'ckpt'}"]
    proc = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == ("fairseq-hydra-train: error: model.clsr_budgett: no such option "
                                                    "of clsr_transformer_tiny: check the key's spelling")
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def test_hydra_train_messages_name_options_as_hydra_overrides(corpus, tmp_path):
    """Under fairseq-hydra-train a refusal names the override to write (``model.encoder_layers=2``), not
    fairseq-train's flag (``--encoder-layers 2``), which a hydra user cannot pass."""
    base = [str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "configs"), "--config-name", "demo",
            f"common.user_dir={PKG_DIR}", f"task.data={corpus['bin']}", "task.langs='en,xx,yy'",
            "task.lang_pairs='en-xx,en-yy'", "model._name=clsr_transformer_tiny", "dataset.max_tokens=500",
            f"checkpoint.save_dir={tmp_path / 'ckpt'}", "checkpoint.save_interval_updates=0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for extra, says in (
            (["+model.clsr_budget=1.5", "optimization.max_update=1"],
             "model.clsr_budget=1.5 is outside [0, 1]: "),
            (["optimization.max_update=1"], None),
            (["+model.encoder_layers=3", "optimization.max_update=2"],
             "was trained with model.encoder_layers=2, this run has model.encoder_layers=3: resume with "
             "model.encoder_layers=2, as it was trained, or start a new run in another checkpoint.save_dir")):
        proc = subprocess.run(base + extra, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        if says is None:
            assert proc.returncode == 0, proc.stderr[-3000:]
            continue
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 1 and last.startswith("fairseq-hydra-train: error: ") and says in last, last


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def outputs_of(procs, timeout):
    """Every process's output, read at once. Was: read one after the other, so a rank whose pipe filled
    (64 KB of log) blocked in its write while the rank being read waited for it in an all-reduce, and
    the 2-rank harness hung until its timeout under pytest-xdist."""
    with concurrent.futures.ThreadPoolExecutor(len(procs)) as pool:
        return list(pool.map(lambda p: p.communicate(timeout=timeout)[0], procs))


def train_two_gloo_ranks(corpus, tmp_path, model_args, max_tokens=500):
    """fairseq-train for 3 updates on 2 gloo ranks started by hand (an explicit --distributed-rank,
    --distributed-init-method and --distributed-no-spawn, as without a launcher), with legacy_ddp;
    returns each rank's output."""
    port = free_port()
    common = [str(BIN / "fairseq-train"), str(corpus["bin"]), "--user-dir", PKG_DIR,
              "--task", "multilingual_langshare", "--langs", "en,xx,yy", "--lang-pairs", "en-xx,en-yy",
              "--encoder-langtok", "tgt", *model_args,
              "--criterion", "langshare_label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", "0.001",
              "--max-tokens", str(max_tokens), "--max-update", "3", "--cpu", "--num-workers", "0",
              "--log-format", "json", "--log-interval", "1", "--save-dir", str(tmp_path / "ckpt"),
              "--no-epoch-checkpoints", "--distributed-backend", "gloo", "--distributed-world-size", "2",
              "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--distributed-no-spawn",
              "--ddp-backend", "legacy_ddp"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(common + ["--distributed-rank", str(rank)], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outs = outputs_of(procs, timeout=600)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    return outs


def test_the_plugin_destroys_a_gloo_process_group_before_the_interpreter_exits(tmp_path):
    """fairseq 0.12 never calls destroy_process_group; a gloo group left to interpreter finalization
    aborted 9 of 60 two-rank runs here ("terminate called without an active exception", SIGABRT) after
    training had finished. An atexit hook registered before the plugin's runs after it (LIFO)."""
    script = tmp_path / "exit.py"
    script.write_text(
        "import atexit, sys\n"
        "import torch.distributed as dist\n"
        "atexit.register(lambda: print('initialized at exit:', dist.is_initialized()))\n"
        f"sys.path.insert(0, {str(Path(PKG_DIR).parent)!r})\n"
        "import fairseq_langshare\n"
        f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', rank=0, world_size=1)\n")
    out = run([sys.executable, str(script)], cwd=tmp_path, timeout=120)
    assert "initialized at exit: False" in out


@pytest.mark.parametrize("arch,derived", [
    ("clsr_transformer_tiny", "clsr_noise_ramp_updates"),
    ("latent_depth_transformer_tiny", "latent_commit_updates"),
    ("adaptive_sparse_transformer_tiny", "sparse_t_bar"),
])
def test_hydra_train_derives_the_run_length_schedules_from_relative_paths(corpus, tmp_path, arch, derived):
    """Was: under fairseq-hydra-train a model could not see optimization.max_update, so CLSR and latent depth
    stopped at the first update ("its length is unknown: pass --max-update") and adaptive sparsity left
    T-bar unset; and hydra ran the job in outputs/DATE/TIME, so the config's relative paths (user_dir, data,
    save_dir: "relative to the directory you run fairseq-hydra-train from") pointed nowhere."""
    import torch
    from fairseq_langshare.models.adaptive_sparse_transformer import default_t_bar
    from fairseq_langshare.models.latent_depth_transformer import default_commit_updates

    (tmp_path / "fairseq_langshare").symlink_to(PKG_DIR)
    (tmp_path / "bin").symlink_to(corpus["bin"])
    run([str(BIN / "fairseq-hydra-train"), "--config-dir", str(REPO / "configs"), "--config-name", "demo",
         "task.data=bin", "task.langs='en,xx,yy'", "task.lang_pairs='en-xx,en-yy'", f"model._name={arch}",
         "optimization.max_update=64", "dataset.max_tokens=500", "checkpoint.save_dir=ckpt",
         "checkpoint.save_interval_updates=0"], cwd=tmp_path)
    model = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", weights_only=False)["cfg"]["model"]
    expected = {"clsr_noise_ramp_updates": 64, "latent_commit_updates": default_commit_updates(64),
                "sparse_t_bar": default_t_bar(64)}[derived]  # what fairseq-train --max-update 64 gives
    assert model[derived] == expected
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("arch", ["langshare_transformer_small", "latent_depth_transformer_tiny",
                                  "adaptive_sparse_transformer_tiny", "clsr_transformer_tiny"])
def test_a_preset_run_on_a_hydra_model_node_fills_what_fairseq_train_would(arch):
    """fairseq-hydra-train runs the preset on the yaml's few-key model node. Under omegaconf 2.0 (fairseq's pin) a
    missing key read as None, so each getattr(args, "x", default) kept None: base_layers None (fairseq's trainer
    compared it with 0), a None --decoder-normalize-before (latent depth, adaptive sparsity refused). Now the
    preset runs on a Namespace and the node gets what it set and every other option's default."""
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY
    from omegaconf import OmegaConf, open_dict

    node = OmegaConf.create({"model": {"_name": arch, "share_all_embeddings": True, "dropout": 0.1}}).model
    with open_dict(node):  # as fairseq's build_model runs it
        ARCH_CONFIG_REGISTRY[arch](node)
    given = argparse.Namespace(_name=arch, share_all_embeddings=True, dropout=0.1)
    ARCH_CONFIG_REGISTRY[arch](given)  # what fairseq-train's preset sets
    assert {k: node[k] for k in vars(given)} == vars(given)
    assert node.base_layers == 0 and node.dropout == 0.1
    if arch.startswith(("latent_depth", "adaptive_sparse")):  # pre-norm presets
        assert node.decoder_normalize_before is True


@pytest.mark.parametrize("prog,expected", [
    ("fairseq-train", ["--max-update 30", "--lsl-search", "--arch clsr_transformer_tiny",
                       "--criterion label_smoothed_cross_entropy", "--save-dir", "--clsr-budget"]),
    ("fairseq-hydra-train", ["optimization.max_update=30", "model.lsl_search=true", "model._name=clsr_transformer_tiny",
                             "criterion._name=label_smoothed_cross_entropy", "checkpoint.save_dir", "--clsr-budget"]),
])
def test_options_are_written_as_the_running_command_takes_them(prog, expected, monkeypatch):
    from fairseq_langshare.user_errors import option_text

    monkeypatch.setattr(sys, "argv", [f"/venv/bin/{prog}"])
    assert [option_text("max_update", "optimization", 30), option_text("lsl_search", "model", True),
            option_text("arch", "model", "clsr_transformer_tiny"),
            option_text("criterion", "criterion", "label_smoothed_cross_entropy"),
            option_text("save_dir", "checkpoint"), option_text("clsr_budget")] == expected
