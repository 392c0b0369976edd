"""Train verl on token trajectories that forkline collected.

verl builds its training batch from AgentLoopOutput objects that an agent
loop returns, and it has no loader for token trajectories collected
elsewhere. `export -to verl-agent` writes one Parquet row per episode with
the prompt columns verl's RLHFDataset reads (data_source, prompt, ability,
reward_model, extra_info) and, next to them, the AgentLoopOutput fields
(prompt_ids, response_ids, response_mask, response_logprobs, reward_score,
num_turns, extra_fields) and agent_name = "forkline_replay". RLHFDataset
passes every column of a row to the agent loop as a keyword argument; the
loop below returns the recorded tokens instead of generating new ones.

    forkline: export -in runs/demo -to verl-agent -out data/verl -split train=0.95,test=0.05

    verl:     data.train_files=data/verl/train.parquet data.val_files=data/verl/test.parquet
              actor_rollout_ref.rollout.agent.agent_loop_config_path=forkline_loops.yaml

    forkline_loops.yaml:
      - name: forkline_replay
        _target_: verl_agent_loop.ForklineReplayAgentLoop

Keep rollout.prompt_length and rollout.response_length at least as long as
the longest recorded prompt and response (the loop refuses a longer prompt
and cuts a longer response, with its mask and logprobs, at the end), and
rollout.n = 1: replaying a row n times gives n identical trajectories.

The recorded logprobs come from the inference server that collected the
episode (vLLM's default is raw logprobs, before temperature and top-p);
verl recomputes old log-probs with the actor, so they serve as
rollout_log_probs only. Assistant tokens have mask 1, tool and template
tokens mask 0 and logprob 0.0, as verl's own loops produce them.

This file is documentation. It follows verl's agent-loop API as of
verl-project/verl in 2026 (verl.experimental.agent_loop); check it against
the verl version you run.
"""

from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)


def _ints(value) -> list[int]:
    # Columns arrive as Python lists or numpy arrays, depending on the collate path.
    return [int(v) for v in value]


@register("forkline_replay")
class ForklineReplayAgentLoop(AgentLoopBase):
    """Returns the token trajectory recorded in a forkline verl-agent row."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        rollout = self.config.actor_rollout_ref.rollout
        prompt_ids = _ints(kwargs["prompt_ids"])
        response_ids = _ints(kwargs["response_ids"])
        response_mask = _ints(kwargs["response_mask"])
        logprobs = kwargs.get("response_logprobs")
        logprobs = None if logprobs is None else [float(v) for v in logprobs]
        extra = dict(kwargs.get("extra_fields") or {})

        if len(response_mask) != len(response_ids) or (logprobs is not None and len(logprobs) != len(response_ids)):
            raise ValueError(f"forkline episode {extra.get('episode_id')}: misaligned token record")
        if len(prompt_ids) > rollout.prompt_length:
            raise ValueError(
                f"forkline episode {extra.get('episode_id')}: prompt of {len(prompt_ids)} tokens is longer "
                f"than rollout.prompt_length={rollout.prompt_length}; raise it or filter the episode out"
            )
        n = rollout.response_length
        reward = kwargs.get("reward_score")

        output = AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:n],
            response_mask=response_mask[:n],
            response_logprobs=None if logprobs is None else logprobs[:n],
            reward_score=None if reward is None else float(reward),
            num_turns=int(kwargs.get("num_turns") or 2),
            metrics=AgentLoopMetrics(),
            extra_fields={
                "traj_exit_reason": extra.get("traj_exit_reason"),
                "task_id": extra.get("task_id"),
                "episode_id": extra.get("episode_id"),
            },
        )
        # The keys verl's built-in loops always set, so batches of mixed loops line up.
        output.extra_fields.update({"turn_scores": [], "tool_rewards": []})
        return output


def drop_nulls(value):
    """Remove the None keys verl-sft rows carry.

    Arrow gives every struct in a column the same keys, so in a verl-sft file
    the tool-call arguments hold every action's fields and the tool
    parameters every tool's properties, the unused ones null. pandas hands
    them to the chat template as None; apply this to each row's messages and
    tools first (for example in a MultiTurnSFTDataset subclass, on
    self.messages and self.tools after _read_files_and_process).
    """
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [drop_nulls(v) for v in value]
    if hasattr(value, "tolist"):
        return drop_nulls(value.tolist())
    return value
