"""Train verl on token trajectories that forkline collected.

verl builds its training batch from AgentLoopOutput objects that an agent
loop returns, and it has no loader for token trajectories collected
elsewhere. `export -to verl-agent` writes Parquet rows with the prompt columns
verl's RLHFDataset reads (data_source, prompt, ability, reward_model,
extra_info) and, next to them, the AgentLoopOutput fields (prompt_ids,
response_ids, response_mask, response_logprobs, reward_score, num_turns,
extra_fields), group_id and agent_name = "forkline_replay". RLHFDataset passes
every column of a row to the agent loop as a keyword argument; the loop below
returns the recorded tokens instead of generating new ones.

    forkline: export -in runs/rl -to verl-agent -out data/verl -split train=0.95,test=0.05 \\
                  -advantage grpo -max-prompt-tokens 4096 -max-response-tokens 8192

    verl:     data.train_files=data/verl/train.parquet data.val_files=data/verl/test.parquet
              actor_rollout_ref.rollout.prompt_length=4096 actor_rollout_ref.rollout.response_length=8192
              actor_rollout_ref.rollout.n=1 algorithm.adv_estimator=grpo
              actor_rollout_ref.rollout.agent.agent_loop_config_path=forkline_loops.yaml

    forkline_loops.yaml:
      - name: forkline_replay
        _target_: verl_agent_loop.ForklineReplayAgentLoop

verl_agent_loop must be importable on every Ray worker (PYTHONPATH or the Ray
runtime_env): the YAML is what registers the loop there; @register alone fills
only the registry of the process that imports this file.

Rows. One per episode (its assembled token record: mask 1 on the model's
tokens, 0 and logprob 0.0 on the environment's), or with -rows turn one per
model turn (that turn's prompt and response ids exactly as the inference
server reported them, mask 1): an episode whose chat template re-rendered its
history differently from what the model generated (token drift) cannot give
an exact episode record, but each of its turns is exact.

Rewards and groups. Every row has a reward_score: episodes the verifier gave
no reward are refused at export (verl would score such a row by data_source,
and nothing in verl scores "forkline"). verl gives every row its own uid, so
with rollout.n = 1 GRPO and RLOO see groups of one, where the score passes
through unchanged (mean 0, std 1). forkline's forked replicas of one task are
natural groups: -advantage grpo (or rloo) writes each row's group-relative
advantage as reward_score, computed at export over its group (same task, task
spec, golden checkpoint and prompt: the group_id column) as verl computes it,
so verl's own estimator trains on exactly that. The raw reward stays in
extra_info.reward.

Lengths. Export with -max-prompt-tokens and -max-response-tokens equal to
rollout.prompt_length and response_length to leave out what does not fit; the
loop left-truncates a longer prompt and cuts a longer response at the end,
with its mask and logprobs, as verl's own loops do, rather than failing the
training step.

Logprobs. verl batches rows together and reads logprobs from the first one;
export refuses a selection that mixes rows with and without them (-where
has_logprobs=true keeps the ones with). The recorded logprobs come from the
server that collected the episode (vLLM's default is raw logprobs, before
temperature and top-p); verl recomputes old log-probs with the actor, so they
serve as rollout_log_probs only.

This file is documentation. It follows verl's agent-loop API as of
verl-project/verl in 2026 (verl.experimental.agent_loop); check it against
the verl version you run. replay_fields holds the loop's logic without verl,
and forkline's tests run it on its own exports.
"""

import logging
from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

logger = logging.getLogger(__name__)


def _ints(value) -> list[int]:
    # Columns arrive as Python lists or numpy arrays, depending on the collate path.
    return [int(v) for v in value]


def replay_fields(row: dict, prompt_length: int, response_length: int) -> dict:
    """The AgentLoopOutput fields of one verl-agent row, fitted to the rollout lengths."""
    prompt_ids = _ints(row["prompt_ids"])
    response_ids = _ints(row["response_ids"])
    response_mask = _ints(row["response_mask"])
    logprobs = row.get("response_logprobs")
    logprobs = None if logprobs is None else [float(v) for v in logprobs]
    extra = dict(row.get("extra_fields") or {})
    episode = extra.get("episode_id")

    if len(response_mask) != len(response_ids) or (logprobs is not None and len(logprobs) != len(response_ids)):
        raise ValueError(f"forkline episode {episode}: misaligned token record")
    if row.get("reward_score") is None:
        raise ValueError(f"forkline episode {episode}: no reward_score (export refuses such rows; was this file edited?)")
    if len(prompt_ids) > prompt_length:
        # As verl's own loops do (AgentLoopBase._cap_text_prompt_length): keep the end.
        logger.warning("forkline episode %s: prompt of %d tokens left-truncated to rollout.prompt_length=%d",
                       episode, len(prompt_ids), prompt_length)
        prompt_ids = prompt_ids[-prompt_length:]
    n = response_length
    return {
        "prompt_ids": prompt_ids,
        "response_ids": response_ids[:n],
        "response_mask": response_mask[:n],
        "response_logprobs": None if logprobs is None else logprobs[:n],
        "reward_score": float(row["reward_score"]),
        "num_turns": int(row.get("num_turns") or 2),
        "extra_fields": {
            "traj_exit_reason": extra.get("traj_exit_reason"),
            "task_id": extra.get("task_id"),
            "episode_id": episode,
            "group_id": row.get("group_id"),
            # The keys verl's built-in loops always set, so batches of mixed loops line up.
            "turn_scores": [],
            "tool_rewards": [],
        },
    }


@register("forkline_replay")
class ForklineReplayAgentLoop(AgentLoopBase):
    """Returns the token trajectory recorded in a forkline verl-agent row."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        rollout = self.config.actor_rollout_ref.rollout
        fields = replay_fields(kwargs, rollout.prompt_length, rollout.response_length)
        return AgentLoopOutput(metrics=AgentLoopMetrics(), **fields)
