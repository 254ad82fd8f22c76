"""The sparsity loss of the adaptive sparse Transformer (Eq. 8) keeps a finite gradient for every score,
including scores that are exactly 0 or 1 (a sampled score underflows at small tau)."""

import math

import pytest
import torch

from fairseq_langshare.modules.sparse_scores import SparseScorer


def test_phase_one_gradients_stay_finite_where_scores_underflow():
    """The review's case: --sparse-tau 0.1 and logits at 0; was: 21 of 200 steps with NaN gradients
    (``xlogy(s, s)`` has the gradient log s + 1 = -inf at s = 0, times sigmoid's 0)."""
    torch.manual_seed(0)
    scorer = SparseScorer("decoder", "tgt", num_langs=3, num_layers=2, num_heads=4, ffn_dim=8,
                          types=("attn", "ffn", "layer"), blocks=2, keep_layers=1, keep_heads=2, keep_blocks=1,
                          t_bar=1000, tau=0.1, logit_init=0.0, c_s=1.0)
    scorer.train()
    bad = 0
    for _ in range(200):
        scorer.zero_grad()
        scorer.prepare(torch.tensor([0, 1, 2]))
        losses, _ = scorer.pop_auxiliary()
        sum(value * weight for value, weight in losses.values()).backward()
        grads = [p.grad for p in scorer.parameters() if p.grad is not None]
        bad += not all(torch.isfinite(g).all() for g in grads)
    assert bad == 0


def test_sparsity_loss_at_exact_zero_and_one():
    from fairseq_langshare.modules.sparse_scores import sparsity_loss

    x = torch.tensor([[-1e4, -200.0, 0.0, 200.0, 1e4]], requires_grad=True)  # sigmoid: 0, ~0, 1/2, 1, 1
    s = torch.sigmoid(x)
    assert s[0, 0] == 0 and s[0, -1] == 1
    loss = sparsity_loss(s, torch.nn.functional.logsigmoid(x))  # log s from the logits
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(x.grad).all()
    # the value is Eq. 8: s (log s - log 0.5), 0 log 0 = 0
    expected = sum(float(v) * (math.log(float(v)) - math.log(0.5)) for v in s[0].tolist() if v > 0)
    assert float(loss) == pytest.approx(expected, abs=1e-5)
