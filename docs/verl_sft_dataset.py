"""Train verl's multi-turn SFT on a forkline verl-sft export, with exact messages.

verl's MultiTurnSFTDataset reads Parquet with pandas (dtype_backend="pyarrow")
and rebuilds each row's messages from the dataframe (_build_messages). pyarrow
gives every message every key of the column's struct, the absent ones as None,
and a chat template renders what it is given: no Parquet encoding reaches the
stock loader as the messages the model saw. So `export -to verl-sft` keeps
nothing of varying shape in a struct — tool-call arguments are the JSON text
the model wrote, the tools one JSON string in the key order the model was sent
them — and this dataset class turns a row back into the conversation:

  - every None key is dropped, except content (verl and the templates read it);
  - tool-call arguments are decoded into objects, for templates that apply
    tojson to them (Qwen2.5, Qwen3, Llama 3.1); with
    data.forkline_tool_args=string they stay the model's text, for templates
    that concatenate them (DeepSeek-V3; export it with -call-content null too);
  - the tools column is decoded into the list of tool schemas.

    forkline: export -in runs/demo -to verl-sft -out data/sft -split train=0.95,test=0.05 -min-reward 1

    verl:     data.train_files=data/sft/train.parquet data.val_files=data/sft/test.parquet
              data.custom_cls.path=docs/verl_sft_dataset.py data.custom_cls.name=ForklineSFTDataset
              data.messages_key=messages data.tools_key=tools

Without this class verl's stock loader fails on the tools column (transformers
refuses tools that are not dicts) rather than training on a wrong system prompt.

verl tokenizes each message apart and checks the concatenation against the
whole conversation; templates that move reasoning between turns (Qwen3 with a
reasoning_content on the last turn) fail that check unless
data.ignore_input_ids_mismatch=True, or export with -reasoning none.

The functions below are what forkline's tests run on its own verl-sft files
(against verl's loader behaviour and the real chat templates); the class is a
thin layer over them, written against verl-project/verl in 2026
(verl.utils.dataset.multiturn_sft_dataset). This file is documentation: check it
against the verl version you run.
"""

import json

from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset
from verl.utils.py_functional import convert_nested_value_to_list_recursive


def forkline_messages(messages, tool_args="object"):
    """The messages of one verl-sft row as the model had them."""
    out = []
    for message in messages:
        m = {k: v for k, v in dict(message).items() if v is not None or k == "content"}
        calls = m.get("tool_calls")
        if calls:
            m["tool_calls"] = [_call(c, tool_args) for c in calls]
        out.append(m)
    return out


def _call(call, tool_args):
    c = {k: v for k, v in dict(call).items() if v is not None}
    fn = {k: v for k, v in dict(c["function"]).items() if v is not None}
    args = fn.get("arguments")
    if tool_args == "object" and isinstance(args, str):
        try:
            decoded = json.loads(args)
        except ValueError:
            decoded = None  # the model's broken call stays its text
        if isinstance(decoded, dict):
            fn["arguments"] = decoded
    c["function"] = fn
    return c


def forkline_tools(tools):
    """The tools column of one row: a JSON string of tool schemas; None for a
    null cell (pandas gives pd.NA there), a run whose model wrote its calls in
    its text and was offered no function tools."""
    if isinstance(tools, str):
        return json.loads(tools)
    if isinstance(tools, list):
        return tools
    return None


class ForklineSFTDataset(MultiTurnSFTDataset):
    """MultiTurnSFTDataset over forkline's verl-sft rows (see the module docs)."""

    def __init__(self, parquet_files, tokenizer, config, processor=None, max_samples=-1):
        self.forkline_tool_args = (config or {}).get("forkline_tool_args", "object")
        if self.forkline_tool_args not in ("object", "string"):
            raise ValueError(f"data.forkline_tool_args={self.forkline_tool_args!r}: want object or string")
        super().__init__(parquet_files, tokenizer, config, processor=processor, max_samples=max_samples)

    def _read_files_and_process(self):
        super()._read_files_and_process()
        if self.tools is not None:
            self.tools = [forkline_tools(t) for t in self.tools]

    def _build_messages(self, example: dict):
        example = dict(example)
        messages = convert_nested_value_to_list_recursive(example[self.messages_key])
        example[self.messages_key] = forkline_messages(messages, self.forkline_tool_args)
        return super()._build_messages(example)
