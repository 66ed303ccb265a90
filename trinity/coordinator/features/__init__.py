"""The coordinator's feature: the backbone's final hidden state at one token position of a transcript.

What each module owns:
- request_queue.py: `FeatureService`, where concurrent episodes await features; it gathers their
  requests into batches and runs each batch as one engine call in a single worker thread.
- engine.py: `FeatureEngine`, one call serves many `FeatureRequest`s: duplicates merged, the content
  cache asked, the rest through the base pass (plain backbone, reusing stored KV prefixes) and the SVF
  pass (the layers a candidate's offsets change). `reference_feature` is the plain forward it must match.
- content_cache.py: `FeatureCache`, features keyed by backbone identity + token ids + SVF offsets,
  an in-memory LRU in front of a SQLite file, so a prompt is computed once across candidates and runs.
- kv_prefix_store.py: `PrefixStore`, the KV caches of earlier prompts, matched by longest common token
  prefix, so a turn that extends an earlier one computes only its new tokens.
- length_buckets.py: `length_batches` groups prompts of similar length so padding stays bounded;
  `resolve_max_padding` turns the configured bound into a number for the device.

A request's path: router -> `FeatureService.features` (queued with the requests of the same tick) ->
`FeatureEngine.features` -> content cache (hit: done) -> misses grouped by length_buckets, each row
reusing its longest stored prefix -> one padded forward per group -> the feature goes into the content
cache and the prompt's KV into the prefix store -> the waiting episode's future is resolved.

`Coordinator` (coordinator.py) builds one of each. The files of the cache_states stage, which holds
precomputed first-turn features, are the pipeline's (trinity/pipeline/state_files.py).
"""
