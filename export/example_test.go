package export_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/forkline/forkline/export"
)

func ExampleRun() {
	split, err := export.ParseSplit("train=0.95,test=0.05")
	if err != nil {
		panic(err)
	}
	done, err := export.ParseWhere("exit_reason=done")
	if err != nil {
		panic(err)
	}
	rep, err := export.Run(context.Background(), export.Options{
		Inputs: []string{"runs/a", "runs/b"},
		Target: "hf",
		Out:    "out/hf",
		Where:  []export.Where{done},
		Split:  split,
	})
	switch {
	case errors.Is(err, export.ErrBadInput):
		fmt.Fprintln(os.Stderr, "fix the options or the inputs:", err)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
	default:
		fmt.Println(rep.Written["train"], "train,", rep.Written["test"], "test")
	}
}

func ExampleTargets() {
	for _, name := range export.Targets() {
		info, _ := export.Describe(name)
		fmt.Printf("%s -> %s\n", name, info.Layout)
	}
	// Output:
	// atif -> DIR/<split>/<episode_id>.json
	// chat-jsonl -> DIR/<split>.jsonl
	// dpo -> DIR/<split>.jsonl
	// hf -> DIR/README.md, DIR/data/<split>-NNNNN-of-MMMMM.parquet
	// hf-disk -> DIR/dataset_dict.json, DIR/<split>/{data-NNNNN-of-MMMMM.arrow,state.json,dataset_info.json}
	// jsonl -> FILE (or - for stdout); one split only
	// sft-tokens -> DIR/README.md, DIR/data/<split>-NNNNN-of-MMMMM.parquet
	// verl-agent -> DIR/<split>.parquet
	// verl-sft -> DIR/<split>.parquet
}

func ExampleParseSplit() {
	parts, err := export.ParseSplit("train=0.9,validation=0.05,test=0.05")
	fmt.Println(parts, err)
	_, err = export.ParseSplit("train=0.5,test=0.25")
	fmt.Println(err)
	// Output:
	// [{train 0.9} {validation 0.05} {test 0.05}] <nil>
	// export: Split "train=0.5,test=0.25": fractions sum to 0.75, not 1
}
