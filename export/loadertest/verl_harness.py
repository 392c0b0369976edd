"""Runs forkline's documented verl classes (docs/verl_sft_dataset.py,
docs/verl_agent_loop.py) on rows the Go side read from an export, against
stand-ins of the verl modules they import: the stand-ins do, for text rows,
what verl's own code does (verl/utils/py_functional.py
convert_nested_value_to_list_recursive; verl/utils/dataset/
multiturn_sft_dataset.py MultiTurnSFTDataset.__init__'s config keys,
_read_files_and_process's messages and tools columns, _build_messages's text
path; verl/experimental/agent_loop/agent_loop.py's AgentLoopBase,
AgentLoopOutput fields, register). Test code: reads one JSON request on
stdin, writes one JSON answer on stdout."""

import asyncio
import importlib.util
import json
import sys
import types


def convert_nested_value_to_list_recursive(data_item):
    if isinstance(data_item, dict):
        return {k: convert_nested_value_to_list_recursive(v) for k, v in data_item.items()}
    if isinstance(data_item, list):
        return [convert_nested_value_to_list_recursive(e) for e in data_item]
    return data_item


ROWS = []  # the dataframe's rows, as pandas(dtype_backend="pyarrow") gives them


class MultiTurnSFTDataset:
    def __init__(self, parquet_files, tokenizer, config, processor=None, max_samples=-1):
        config = config or {}
        self.messages_key = config.get("messages_key", "messages")
        self.image_key = config.get("image_key", "images")
        self.video_key = config.get("video_key", "videos")
        self.tools_key = config.get("tools_key", "tools")
        self.enable_thinking_key = config.get("enable_thinking_key", "enable_thinking")
        self.processor = processor
        self._read_files_and_process()

    def _read_files_and_process(self):
        self.dataframe = ROWS
        self.messages = [convert_nested_value_to_list_recursive(r[self.messages_key]) for r in ROWS]
        if ROWS and self.tools_key in ROWS[0]:
            self.tools = [convert_nested_value_to_list_recursive(r[self.tools_key]) for r in ROWS]
        else:
            self.tools = None
        if ROWS and self.enable_thinking_key in ROWS[0]:
            self.enable_thinking = [r[self.enable_thinking_key] for r in ROWS]
        else:
            self.enable_thinking = None

    def _build_messages(self, example):
        messages = convert_nested_value_to_list_recursive(example[self.messages_key])
        for message in messages:
            content = message["content"]  # verl reads it: a message without it fails here
            if not isinstance(content, str):
                continue
            if self.image_key not in example and self.video_key not in example:
                continue
            raise AssertionError("forkline rows carry no images")
        return messages


class AgentLoopMetrics:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class AgentLoopOutput:
    FIELDS = ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "reward_score",
              "num_turns", "metrics", "extra_fields")

    def __init__(self, **kw):
        for required in ("prompt_ids", "response_ids", "response_mask", "metrics"):
            if required not in kw:
                raise TypeError(f"AgentLoopOutput: {required} is required")
        unknown = set(kw) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"AgentLoopOutput: unknown fields {sorted(unknown)}")
        self.__dict__.update({"response_logprobs": None, "reward_score": None, "num_turns": 0, "extra_fields": {}})
        self.__dict__.update(kw)


class AgentLoopBase:
    def __init__(self, config):
        self.config = config


REGISTRY = {}


def register(name):
    def deco(cls):
        REGISTRY[name] = cls
        return cls
    return deco


class Attr(dict):
    __getattr__ = dict.__getitem__


def install():
    mods = {}
    for name in ["verl", "verl.utils", "verl.utils.dataset", "verl.utils.dataset.multiturn_sft_dataset",
                 "verl.utils.py_functional", "verl.experimental", "verl.experimental.agent_loop",
                 "verl.experimental.agent_loop.agent_loop"]:
        mods[name] = types.ModuleType(name)
        sys.modules[name] = mods[name]
    mods["verl.utils.py_functional"].convert_nested_value_to_list_recursive = convert_nested_value_to_list_recursive
    mods["verl.utils.dataset.multiturn_sft_dataset"].MultiTurnSFTDataset = MultiTurnSFTDataset
    al = mods["verl.experimental.agent_loop.agent_loop"]
    al.AgentLoopBase, al.AgentLoopMetrics, al.AgentLoopOutput, al.register = AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    req = json.load(sys.stdin)
    install()
    ROWS.extend(req["rows"])
    mod = load(req["module"], "forkline_doc")
    out = []
    if req["mode"] == "sft":
        ds = mod.ForklineSFTDataset(["unused.parquet"], None, req.get("config") or {})
        for i, row in enumerate(ROWS):
            messages = ds._build_messages(dict(row))
            tools = ds.tools[i] if ds.tools is not None else None
            out.append({"messages": messages, "tools": tools})
    elif req["mode"] == "agent":
        cls = REGISTRY["forkline_replay"]
        rollout = Attr(prompt_length=req["prompt_length"], response_length=req["response_length"])
        loop = cls(Attr(actor_rollout_ref=Attr(rollout=rollout)))
        for row in ROWS:
            o = asyncio.run(loop.run({}, **row))
            out.append({k: getattr(o, k) for k in AgentLoopOutput.FIELDS if k != "metrics"})
    else:
        raise SystemExit(f"unknown mode {req['mode']}")
    json.dump(out, sys.stdout)


main()
