"""What a configuration will cost before it runs (`trinity plan`): pool calls, tokens, dollars, wall time.

Pure functions of the composed config (plus the prepared Parquet files and a backbone's config.json when
they exist); nothing here starts a server, loads a model or needs an API key.

The package: `build` (the plan of a config), `chain` (one episode's expected calls), `tokens` (tokens per
call), `usage` (calls, tokens, dollars, wall time), `suites` (items and prompt lengths), `popsize`,
`assumptions`, `render` (the printed table), `recording` (what `trinity record` will cost). What each stage
runs is not decided here: each stage's hook in trinity.pipeline.workload.WORKLOADS gives its parts.

Workload (what the pipeline really runs; see trinity.evolve.loop, trinity.pipeline.*_stage):
- evolve: per generation, popsize candidates x `episodes_per_candidate` training items (balanced over
  the training suites) x `evolve.repeats`; the mean is validated on `evolve.validation.n_items` items every
  `validation.every` generations and after the last one, and x0 before generation 0 (generation -1),
  each validation in BOTH routing modes (sample, argmax). popsize null -> ceil(4 + 3 ln n), with n from
  the backbone's hidden size (its config.json when cached, else a table of known backbones) and the SVF
  matrices. Early stopping (`early_stop_patience`) and budgets are not modelled: a full run is assumed.
- frontier (`evolve.cost_weights`): every weight other than the main run's runs the same evolution at the
  main run's popsize; then every head (the main one too) and the baselines single_worker, random and moa on
  the test items (the baselines' chunks are the evaluate stage's: counted here, free there, not modelled).
- ablate (`ablations.enabled`): every selected variant runs the same evolution at the main run's popsize.
- evaluate: every method of `eval.methods` expanded as trinity.eval.methods expands it (groups to one per
  pool model; `ablations` to one per enabled variant; methods that need a trained coordinator count as if
  it existed) on the validation items evolution used plus `eval.items_per_suite` test items per suite
  (null: the whole test split), x `eval.repeats`.
- item counts come from the prepared Parquet files when `paths.prepared` holds them for this config's
  seed, splits and cap, else from DEFAULT_SUITES (rows measured on the offline packages, assumed for the
  hub-only suites) split by `tasks.splits`.

Calls per episode (expected, and the upper bound max_turns per episode):
- A router that picks (agent, role) at random is an exact Markov chain over the protocol's states
  (turn, Worker answers so far, pending Thinker advice), stepped by the rules run_episode plays
  (trinity.episodes.protocol.TurnState; no copy of them here): a Verifier
  before any answer ends the episode with no call; ACCEPT (assumed probability `accept`, default 0.5)
  ends it; a Thinker's suggestion sets the next turn's role (Worker with assumed probability
  `suggest_worker`, default 0.5, else Verifier). Every call is assumed to succeed and every Thinker reply
  to be valid. x0 (a zero head) samples every pool model and every role of `coordinator.roles` with equal
  probability; under argmax it picks the first model as a Worker on every turn (K calls).
- A trained coordinator (later validations, eval's `trinity*`, `roles:*`, `ablation:*`) is estimated as
  x0 (sample routing): its real routing is unknown before it is trained. `random`: uniform over all roles.
  `single:<m>`: 1 call. `loop:<m>`: Worker, Verifier, Worker, ... `moa:<m>`: n_models + 1 calls.
- A suite graded by a judge (MT-Bench) adds one judge call per episode that ends with an answer.

Tokens per call:
- prompt: (characters / 4) of the system prompt, the task prompt (the mean over the prepared items, else
  DEFAULT_SUITES) and the protocol's templates, + MESSAGE_OVERHEAD per message; plus the growing
  transcript: a Worker sees every earlier Worker reply's thought (and the Thinker's suggestion when it
  carries one), a Thinker or Verifier sees the current answer. A reply counts as output_fraction x its cap.
- completion: the output cap of that role, suite and model (protocol.max_tokens per role and suite, else
  pool.models.<m>.max_tokens, else pool.sampling.max_tokens, else UNCAPPED_TOKENS). Caps are an upper
  bound, so every figure is given twice: "at cap" and "typical" (replies at `output_fraction` of the cap,
  default 0.6, which also shortens the transcript the later prompts carry).

Dollars: pool.models.<m>.price_in_per_mtok / price_out_per_mtok. Wall time: per stage, each model's
decode tokens / throughput.decode_tok_s + prompt tokens / throughput.prefill_tok_s, combined as a
generation's floor is (trinity.evolve.efficiency.work_floor: hosted models in parallel, local servers
sharing this machine's cores); stages run one after another. It is an estimate, not a bound: the response
cache (candidates and, with evolve.train_items=fixed, generations share calls) and the servers' prompt
prefix cache make real runs shorter; queueing, the coordinator's own forward passes, grading and start-up
make them longer.
"""
