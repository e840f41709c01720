"""Parity with the published implementation (golden fixtures) and the
``python -m disco.parity`` command line, plus a check that the Disco103
meta-network is not tied to the fixtures' shapes."""

from __future__ import annotations

from pathlib import Path
import shutil
import subprocess
import sys

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import ops
from disco import parity
from disco import types
from disco import weights as weights_lib
from disco.meta import meta_gradient
from disco.networks import meta_nets
from disco.parity import comparisons
from disco.parity import fixtures
from disco.parity import runners
from disco.update_rules import actor_critic
from disco.update_rules import disco as disco_rule

# At the XLA pipeline users get: these pin the numbers they compute.
pytestmark = pytest.mark.xla_optimized

FIXTURES = (
    "actor_critic_learner_step_s0.npz",
    "disco_meta_net_s0.npz",
    "disco_learner_step_s0.npz",
    "disco_meta_gradient_s0.npz",
    "grads/actor_critic_learner_step_s0.npz",
    "grads/disco_learner_step_s0.npz",
)
# Several meta-steps of the published meta-training notebook (small settings;
# made by benchmarks/published_meta_train.py, committed: it needs no shared
# files).
META_STEPS_FIXTURE = Path(__file__).parent / "data" / "meta_train_steps_s0.npz"
# The cheapest fixture to run: used by the command-line tests.
CLI_FIXTURE = "actor_critic_learner_step_s0.npz"


def _describe(report: parity.Report) -> str:
  bad = [f"{c.key}: {c.error:.3e}" for c in report.comparisons if not c.ok]
  return (
      f"{report.path}: kind={report.kind} error={report.error} "
      f"worst={report.worst} failing={bad}"
  )


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_parity(name, fixtures_dir, require_shared_path, request):
  path = require_shared_path(fixtures_dir / name, f"the fixture {name}")
  weights_path = None
  if name.startswith("disco"):
    weights_path = request.getfixturevalue("disco103_path")
  report = parity.check_fixture(path, weights_path)
  print(_describe(report))
  assert report.error is None, _describe(report)
  assert report.comparisons, "the fixture has no outputs to compare"
  assert report.ok, _describe(report)
  # Every output array of the fixture (and the gradients of its grads/ copy)
  # was compared.
  with np.load(path) as data:
    n_outputs = sum(k.startswith("outputs" + fixtures.SEP) for k in data.files)
  if "learner_step" in name:
    assert report.rule == "gradients"
    grads = [c for c in report.comparisons if c.key.startswith("grads::")]
    params = [c for c in report.comparisons if c.key.startswith("params::")]
    assert len(grads) == len(params) > 0
    if not name.startswith("grads/"):
      n_outputs += len(grads)
  assert len(report.comparisons) == n_outputs


# A deliberately wrong loss term, injected by patching a rule's loss (the
# package's code is unchanged).
def _aux_loss_without_stop_gradient(original):
  """Disco's loss with the stop-gradient on the one-step policy
  prediction's target moved: the same value, but a gradient also reaches
  the next states' logits."""

  def agent_loss(self, inputs, meta_out, backprop):
    loss, logs = original(self, inputs, meta_out, backprop)
    aux_pi_a = ops.at_actions(
        inputs.agent_out["aux_pi"][:-1], inputs.actions[:-1]
    )
    next_logits = inputs.agent_out["logits"][1:]

    def aux_kl(target):
      return ops.categorical_kl(target, aux_pi_a) * (1.0 - inputs.is_terminal)

    leak = aux_kl(next_logits) - aux_kl(jax.lax.stop_gradient(next_logits))
    return loss + self.hyper_params["aux_policy_cost"] * leak, logs

  return agent_loss


def _entropy_sign_flipped(original):
  """Actor-critic's loss with the entropy bonus's sign flipped."""

  def agent_loss(self, inputs, meta_out, backprop):
    loss, logs = original(self, inputs, meta_out, backprop)
    entropy = ops.softmax_entropy(inputs.agent_out["logits"][:-1])
    return loss + 2 * self.hyper_params["entropy_cost"] * entropy, logs

  return agent_loss


@pytest.mark.parametrize(
    "name,rule_class,wrong_loss",
    [
        (
            "grads/disco_learner_step_s0.npz",
            disco_rule.Disco,
            _aux_loss_without_stop_gradient,
        ),
        (
            "grads/actor_critic_learner_step_s0.npz",
            actor_critic.ActorCritic,
            _entropy_sign_flipped,
        ),
    ],
    ids=["moved_stop_gradient", "flipped_sign"],
)
def test_wrong_loss_term_fails_the_gradient_rule(
    name, rule_class, wrong_loss, fixtures_dir, monkeypatch, request
):
  weights_path = None
  if name.startswith("grads/disco"):
    weights_path = request.getfixturevalue("disco103_path")
  monkeypatch.setattr(
      rule_class, "agent_loss", wrong_loss(rule_class.agent_loss)
  )
  report = parity.check_fixture(fixtures_dir / name, weights_path)
  assert report.rule == "gradients"
  assert not report.ok, _describe(report)
  failing = [c.key for c in report.comparisons if not c.ok]
  assert any(k.startswith("grads::") for k in failing), failing
  if wrong_loss is _aux_loss_without_stop_gradient:
    # The loss values are those of the right loss: only the gradients, their
    # norm and the parameters they move tell the error apart.
    gradient_logs = {"logs::global_gradient_norm", "logs::global_update_norm"}
    assert not {k for k in failing if k.startswith("logs::")} - gradient_logs


def test_rounding_robust_rule_for_updated_params():
  rng = np.random.default_rng(0)
  ref = rng.normal(size=1000)
  lr, max_abs_update = 1e-2, 1.0
  max_step = 2 * lr * max_abs_update
  compare = lambda ours: comparisons.compare_array(
      "p", ours, ref, True, max_step
  )
  # Adam's first step flipped on a few elements (gradients near zero):
  # within two steps, allowed for up to 1% of the elements.
  flipped = ref.copy()
  flipped[:10] += 2 * lr
  assert compare(flipped).ok
  flipped[:11] += 2 * lr
  assert not compare(flipped).ok
  # Further than two steps, even on one element.
  far = ref.copy()
  far[0] += max_step + 2e-4 * (1 + np.abs(ref).max())
  assert not compare(far).ok
  # Without gradients in the fixture: the 99.9% rule.
  one_flip = ref.copy()
  one_flip[:2] += 2 * lr
  assert not comparisons.compare_array("p", one_flip, ref, True).ok
  assert compare(one_flip).ok


def test_gradients_by_norm():
  ref = np.linspace(-1.0, 1.0, 100)
  ok = comparisons.compare_gradient("g", ref * (1 + 5e-4), ref)
  bad = comparisons.compare_gradient("g", ref * (1 + 2e-3), ref)
  assert ok.ok and not bad.ok
  assert not comparisons.compare_gradient("g", np.zeros(3), np.zeros(4)).ok


def test_companion_gradients_only_from_an_identical_copy(tmp_path):
  fx = {"kind": np.array("k"), "inputs::x": np.arange(3.0)}
  grads = {"outputs::grads::w": np.ones(2)}
  (tmp_path / fixtures.GRADS_DIR).mkdir()
  path = tmp_path / "f.npz"
  np.savez(path, **fx)
  companion = tmp_path / fixtures.GRADS_DIR / "f.npz"
  np.savez(companion, **fx, **grads)
  merged = fixtures.with_companion_gradients(path, dict(fx))
  assert fixtures.has_gradients(merged)
  np.testing.assert_array_equal(merged["outputs::grads::w"], np.ones(2))
  # A copy with other inputs is not used.
  np.savez(companion, **dict(fx, **{"inputs::x": np.zeros(3)}), **grads)
  assert not fixtures.has_gradients(fixtures.with_companion_gradients(path, fx))


def test_checks_run_at_full_float32_matmul_precision(monkeypatch, tmp_path):
  """The fixtures hold float32 products; on GPUs JAX's default is TF32."""
  seen = []

  def load(path):
    seen.append(jax.config.jax_default_matmul_precision)
    return {"kind": np.array("unknown")}

  monkeypatch.setattr(fixtures, "load_fixture", load)
  report = parity.check_fixture(tmp_path / "f.npz")
  assert "unsupported fixture kind" in report.error
  assert seen == ["highest"]
  assert jax.config.jax_default_matmul_precision != "highest"


def test_meta_train_steps_parity():
  """Four consecutive meta-steps of our population (two agents, small
  networks) from the notebook's initial state and keys give the published
  notebook's meta-gradients, meta-parameters, agent and environment states
  and logs (``benchmarks/published_meta_train.py`` made the fixture; it needs
  no shared files). Our own initialisation from the same seeds is compared
  too."""
  report = parity.check_fixture(META_STEPS_FIXTURE)
  assert report.error is None, _describe(report)
  assert report.ok, _describe(report)
  keys = [c.key for c in report.comparisons]
  for part in (
      "initial::meta_params::",
      "initial::agents::1::learner_params::",
      "steps::3::key (exact)",
      "steps::3::logs::meta_loss",
      "steps::3::logs::rewards",
      "steps::3::meta_grads::",
      "steps::3::meta_params_delta::",
      "steps::3::agents::1::env_game (exact)",
      "steps::3::agents::1::value_params::",
      "final::agents::1::learner_params::",
  ):
    assert any(k.startswith(part) for k in keys), part


@pytest.mark.slow  # the unrolled meta-gradient's parity runs in CI
def test_meta_gradient_parity_with_a_rolled_inner_loop(fixtures_dir):
  """The inner steps as a ``lax.scan`` loop (the default unrolls the
  fixture's 2 steps) give the published meta-gradient too."""
  report = parity.check_fixture(
      fixtures_dir / "disco_meta_gradient_s0.npz",
      meta_gradient_config=meta_gradient.OuterLossConfig(
          max_unrolled_inner_steps=0
      ),
  )
  assert report.ok, _describe(report)


def test_cli_passes_on_good_fixture(fixtures_dir, capsys):
  assert parity.main([str(fixtures_dir / CLI_FIXTURE)]) == 0
  out = capsys.readouterr().out
  assert "PASS" in out and "FAIL" not in out


def test_cli_fails_on_unsupported_kind(tmp_path, capsys):
  bogus = tmp_path / "bogus.npz"
  np.savez(bogus, kind=np.array("bogus"), **{"outputs::x": np.zeros(2)})
  assert parity.main([str(bogus)]) != 0
  out = capsys.readouterr().out
  assert "FAIL" in out and "unsupported fixture kind 'bogus'" in out
  for kind in runners.KINDS:  # the message lists the supported kinds
    assert kind in out


def test_the_documented_command_runs_the_package(tmp_path):
  """``python -m disco.parity`` (a package: its ``__main__``) checks the
  fixtures it names and exits 1 on a failure."""
  bogus = tmp_path / "bogus.npz"
  np.savez(bogus, kind=np.array("bogus"))
  result = subprocess.run(
      [sys.executable, "-m", "disco.parity", str(bogus)],
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert result.returncode == 1, result.stderr[-2000:]
  assert "unsupported fixture kind 'bogus'" in result.stdout


def test_cli_fails_on_unreadable_file(tmp_path, capsys):
  garbage = tmp_path / "garbage.npz"
  garbage.write_bytes(b"<html>not a fixture</html>")
  assert parity.main([str(garbage)]) != 0
  assert "cannot read fixture" in capsys.readouterr().out


@pytest.mark.parametrize("which", ["log", "one_param_element"])
def test_cli_fails_on_corrupted_output(which, fixtures_dir, tmp_path, capsys):
  src = fixtures_dir / CLI_FIXTURE
  with np.load(src) as data:
    fx = {k: data[k] for k in data.files}
  if which == "log":
    key = "outputs::logs::total_loss"
    fx[key] = fx[key] + 10.0 * (1.0 + np.abs(fx[key]))
  else:
    # A single element off: passes the 99.9% rule for updated parameters but
    # not the bound that every element must meet.
    key = next(
        k
        for k in sorted(fx)
        if k.startswith("outputs::params::") and fx[k].size > 1000
    )
    value = fx[key].copy()
    value.flat[0] += 10.0 * (1.0 + np.abs(value).max())
    fx[key] = value
  bad = tmp_path / "corrupted.npz"
  np.savez(bad, **fx)
  good = tmp_path / "good.npz"
  shutil.copy(src, good)
  # One bad fixture among good ones still fails the whole run.
  assert parity.main([str(good), str(bad)]) != 0
  out = capsys.readouterr().out
  good_line, bad_line = out.strip().splitlines()
  assert good_line.endswith("PASS")
  assert "FAIL" in bad_line
  assert key[len("outputs::") :] in bad_line


# ------------------------------------------------------ generality ----
@pytest.fixture(scope="module")
def disco103_net(disco103_path):
  """Disco103 meta-parameters (checked against the rule) and a jitted apply."""
  rule = disco_rule.Disco()
  expected = jax.eval_shape(rule.init_meta_params, jax.random.PRNGKey(0))
  params = weights_lib.load_disco103(disco103_path)
  weights_lib.check_params_match(params, expected)  # raises on any mismatch
  net = meta_nets.make_meta_net(meta_nets.MetaNetConfig())
  return params, jax.jit(net.apply)


def _random_meta_inputs(seed, t, b, a, p=600, bins=601):
  rng = np.random.default_rng(seed)

  def normal(*shape):
    return jnp.asarray(rng.normal(size=shape), jnp.float32)

  def agent_out():
    return dict(
        logits=normal(t + 1, b, a),
        y=normal(t + 1, b, p),
        z=normal(t + 1, b, a, p),
        aux_pi=normal(t + 1, b, a, a),
        q=normal(t + 1, b, a, bins),
    )

  return types.UpdateRuleInputs(
      observations=None,
      actions=jnp.asarray(rng.integers(0, a, (t + 1, b)), jnp.int32),
      rewards=normal(t, b),
      is_terminal=jnp.asarray(rng.random((t, b)) < 0.3),
      agent_out=agent_out(),
      behaviour_agent_out=agent_out(),
      extra_from_rule=dict(
          v_scalar=normal(t + 1, b),
          adv=normal(t, b),
          normalized_adv=normal(t, b),
          q=normal(t + 1, b, a),
          qv_adv=normal(t + 1, b, a),
          normalized_qv_adv=normal(t + 1, b, a),
          target_out=agent_out(),
      ),
  )


@pytest.mark.parametrize("t,b,a", [(3, 2, 4), (5, 1, 2)])
def test_disco103_meta_net_other_shapes(disco103_net, t, b, a):
  params, apply = disco103_net
  inputs = _random_meta_inputs(t * 100 + b * 10 + a, t, b, a)
  rng = np.random.default_rng(0)
  state = {"lstm": {"meta_rnn_state": _lstm_state(rng, 128)}}
  out, new_state = apply(params, state, None, inputs)
  assert out["pi"].shape == (t, b, a)
  assert out["y"].shape == (t, b, 600)
  assert out["z"].shape == (t, b, 600)
  assert out["meta_input_emb"].shape == (t, b, 1)
  new_rnn = new_state["lstm"]["meta_rnn_state"]
  assert new_rnn.hidden.shape == new_rnn.cell.shape == (128,)
  for x in (*out.values(), new_rnn.hidden, new_rnn.cell):
    assert np.all(np.isfinite(x))
  # The targets depend on the inputs (not constant over time or batch).
  assert np.std(np.asarray(out["y"]), axis=(0, 1)).max() > 1e-3
  assert np.std(np.asarray(out["pi"]), axis=(0, 1)).max() > 1e-3
  # The meta-RNN took a step.
  assert not np.allclose(new_rnn.hidden, state["lstm"]["meta_rnn_state"].hidden)


def _lstm_state(rng, size):
  return hk.LSTMState(
      hidden=jnp.asarray(rng.normal(scale=0.1, size=size), jnp.float32),
      cell=jnp.asarray(rng.normal(scale=0.1, size=size), jnp.float32),
  )
