// Package hf writes Hugging Face datasets: Parquet files whose schema
// metadata carries datasets' features (target hf, with a README.md dataset
// card), and the save_to_disk layout of Arrow IPC streams (target hf-disk):
// the rows (EpisodeFeatures, StepFeatures), the card, the files.
//
// It writes through formats/model's typed table (model.Features,
// model.TableWriter) and builds rows from model.Episode and its messages.
// It does not select, split or read episodes (package export) and imports
// no other target.
//
// # Types
//
// Every column, struct child and list item is nullable, with exactly the
// Arrow type datasets builds for its feature (string is utf8, never
// large_utf8; Image is struct<bytes: binary, path: string>), because
// datasets uses the metadata features only where they equal the file's
// Arrow fields. Feature JSON uses the encoding both datasets 3.x and 4.x
// read: lists as one-element arrays ([x]), never {"_type": "List"}. Parquet
// files also store ARROW:schema with list items named "item", as pyarrow
// writes them. Screenshots are Image values with the PNG bytes embedded.
//
// # Rows (-rows)
//
// episode (default): episode_id, run_id, task_id, instruction, exit_reason,
// answer, steps, reward, rewards, messages (conversation; tool-call
// arguments as JSON strings), tools (JSON string), screenshots (Image list),
// images (Image list), the token record (prompt_ids, response_ids,
// response_mask int8, response_logprobs), token_drift, duration_ms.
//
// Two image lists, for two readers: screenshots has one entry per step
// (item i is step i's screenshot, null where it took none), for tools that
// look at trajectories; images is TRL's VLM format, the images the model
// saw in the order its messages' {"type": "image"} parts stand for them
// (the start page's first, each screenshot where the policy showed it,
// none past max_images), empty for a run whose model saw no images — so
// a text conversation never carries an images column TRL would try to
// feed a processor.
//
// step: one row per step with the instruction, the screenshot the model
// saw before it acted (screenshot_before: the start page's for the first
// step), the action, observation, screenshot after it (Image), the step's
// token ids, step_reward and episode_reward.
//
// # Layouts
//
//	hf:       DIR/README.md                                 dataset card: configs, dataset_info (features, exact split sizes)
//	          DIR/data/<split>-NNNNN-of-MMMMM.parquet        per split, new shard after ~500 MB
//	hf-disk:  DIR/dataset_dict.json                         {"splits": [...]}
//	          DIR/<split>/data-NNNNN-of-MMMMM.arrow          Arrow IPC stream (not the IPC file format)
//	          DIR/<split>/state.json                        all seven keys load_from_disk reads
//	          DIR/<split>/dataset_info.json                 features
//
// Every split gets at least one shard, empty when no episode went to it.
// Output is deterministic: the same episodes give the same bytes. The
// hf-disk fingerprint is derived from the shards' bytes, not random.
package hf
