"""Coordinator features: the final hidden state (after the final norm) at a token position of the
chat-formatted prompt, computed as cheaply as the caches allow.

One call of `FeatureEngine.features(requests)` serves many requests at once:
1. content cache: prompts (and SVF offsets) seen before cost nothing (content_cache.py);
2. base pass: the remaining prompts run through the plain backbone in padded batches; each reuses the KV
   cache of the stored prompt with which it shares the longest token prefix (kv_prefix_store.py), so a
   turn costs only its new tokens. Prompts are grouped by the tokens they compute, with padding bounded
   by `max_padding` (length_buckets.py). Batch layout per row: [left pad | reused past | new tokens |
   right pad], with a 2-D attention mask over past + new and explicit position ids, so padding changes
   nothing;
3. SVF pass: a candidate's offsets change only the layers from the first adapted one onward, so the
   base pass also records the activations entering that layer, and each candidate reruns only the
   remaining layers (many candidates per batch, one row each, coordinator/svf.py). When the embeddings
   are adapted the whole decoder reruns per candidate.

Equality with a plain single-prompt forward holds up to float rounding (different matmul shapes sum in
a different order): tests check max |difference| <= 1e-4 relative to the feature's max magnitude in
float32. `reference_feature` is that plain forward.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from transformers import DynamicCache

from trinity.coordinator.features.content_cache import FeatureCache
from trinity.coordinator.features.kv_prefix_store import PrefixEntry, PrefixStore
from trinity.coordinator.features.length_buckets import length_batches
from trinity.coordinator.prompt import PromptRenderer
from trinity.coordinator.svf import SVFAdapter
from trinity.errors import TrinityError

log = logging.getLogger(__name__)

TOKEN_MEMO_SIZE = 2048   # transcripts whose token ids are kept (about 14 KB each at 1,700 tokens)


class FeatureError(TrinityError):
    """A prompt cannot give a feature (e.g. shorter than the configured token position)."""


@dataclass
class FeatureRequest:
    transcript: str
    svf_deltas: np.ndarray | None = None  # the SVF part of a candidate's parameters; None = plain backbone


@dataclass
class _Job:
    tokens: np.ndarray
    deltas: np.ndarray | None
    key: str | None
    feature: np.ndarray | None = None
    entering: torch.Tensor | None = None
    others: dict[int, np.ndarray] | None = None   # features at the other token positions asked for (features_at)


class FeatureEngine:
    def __init__(
        self,
        backbone: Any,
        renderer: PromptRenderer,
        *,
        token_position: int = -2,
        svf: SVFAdapter | None = None,
        cache: FeatureCache | None = None,
        prefix_tokens: int = 32768,
        max_batch: int = 16,
        max_padding: float | None = None,
    ):
        self.backbone = backbone
        self.renderer = renderer
        self.token_position = int(token_position)
        self.svf = svf if svf is not None and svf.affects_features else None
        self.cache = cache
        self.max_batch = max(1, int(max_batch))
        self.max_padding = max_padding  # padding slots allowed per batch, as a fraction of real tokens (None: any)
        reuse = prefix_tokens > 0 and not backbone.uses_sliding_window()
        self.prefix_store = PrefixStore(prefix_tokens) if reuse else None
        self.pad_id = _pad_id(backbone.tokenizer)
        self._lock = threading.Lock()
        self._token_lock = threading.Lock()
        self._token_memo: OrderedDict[str, np.ndarray] = OrderedDict()   # transcript -> token ids, latest last
        self._other_positions: tuple[int, ...] = ()   # set for one features_at call
        self.stats = {"requests": 0, "computed_tokens": 0, "reused_tokens": 0, "forward_passes": 0, "svf_rows": 0}
        self._partial_svf = self.svf is not None and self.svf.reuses_activations
        if self._partial_svf and not self._partial_svf_matches_full():
            log.warning("SVF from cached activations does not match the full forward for this backbone; "
                        "recomputing all layers")
            self._partial_svf = False

    # ------------------------------------------------------------------ public API
    @property
    def hidden_size(self) -> int:
        return int(self.backbone.hidden_size)

    def tokens(self, transcript: str) -> np.ndarray:
        """The prompt's token ids (a copy: the caller may keep or change it). A transcript seen lately is not
        rendered and tokenized again: sampled episodes ask for the same few transcripts of an item over and over,
        and the chat template and tokenizer cost more than the cached state they look up."""
        with self._token_lock:
            known = self._token_memo.get(transcript)
            if known is not None:
                self._token_memo.move_to_end(transcript)
        if known is None:
            known = np.asarray(self.renderer.token_ids(transcript), dtype=np.int64)
            with self._token_lock:
                self._token_memo[transcript] = known
                while len(self._token_memo) > TOKEN_MEMO_SIZE:
                    self._token_memo.popitem(last=False)
        ids = known.copy()
        for position in (self.token_position, *self._other_positions):
            if _index(len(ids), position) is None:
                raise FeatureError(f"the coordinator prompt has {len(ids)} tokens, too few for "
                                   f"token position {position}")
        return ids

    def features(self, requests: Sequence[FeatureRequest | str], *, isolated: bool = False) -> np.ndarray:
        """Features of many requests, (n, d) float32, in request order.

        `isolated=True` gives bytes that depend only on the requests (and backbone, dtype, device class,
        max_batch, max_padding), never on earlier calls: of the content cache only its pinned entries (the
        state files' features, themselves computed isolated) are read, and prefix reuse starts from an empty
        store, so which prompts were computed before, in which batches, cannot change the rounding (the
        cache_states stage, exact fitness on a recording). The results still go into the content cache."""
        with self._lock, torch.inference_mode():
            batch = [r if isinstance(r, FeatureRequest) else FeatureRequest(r) for r in requests]
            if not isolated:
                return self._features(batch)[0]
            return self._isolated(batch, read="pinned")[0]

    def features_at(self, transcripts: Sequence[str], positions: Sequence[int]) -> dict[int, np.ndarray]:
        """Isolated features of plain prompts at several token positions, {position: (n, d) float32}, from
        one forward pass per prompt (the cache_states stage: the configured position and those that
        ablations read). Nothing of the content cache is read; the configured position's features go
        into it as usual. The bytes depend only on the prompts and the positions asked for."""
        positions = tuple(dict.fromkeys(int(p) for p in positions))
        with self._lock, torch.inference_mode():
            self._other_positions = tuple(p for p in positions if p != self.token_position)
            try:
                out, sources = self._isolated([FeatureRequest(t) for t in transcripts], read="none")
            finally:
                self._other_positions = ()
        result = {self.token_position: out} if self.token_position in positions else {}
        for position in positions:
            if position != self.token_position:
                rows = [cast("dict[int, np.ndarray]", job.others)[position] for job in sources]
                result[position] = np.stack(rows) if rows else np.empty((0, self.hidden_size), dtype=np.float32)
        return result

    def _isolated(self, batch: list[FeatureRequest], *, read: str) -> tuple[np.ndarray, list[_Job]]:
        store = self.prefix_store
        self.prefix_store = PrefixStore(store.max_tokens) if store is not None else None
        try:
            return self._features(batch, read=read)
        finally:
            self.prefix_store = store

    def reference_feature(self, transcript: str, svf_deltas: np.ndarray | None = None) -> np.ndarray:
        """The plain forward of one prompt: no cache, no prefix reuse, no batching (the ground truth)."""
        with self._lock, torch.inference_mode():
            ids = self.tokens(transcript)
            deltas = self._effective_deltas(svf_deltas)
            if deltas is not None:
                self._adapter.set_rows([deltas])
            try:
                out = self.backbone.decoder(input_ids=torch.as_tensor(ids, device=self.backbone.device)[None],
                                            use_cache=False)
            finally:
                if self.svf is not None:
                    self.svf.clear()
            return _to_numpy(out.last_hidden_state[0, self._feature_index(len(ids))])

    # ------------------------------------------------------------------ orchestration
    def _features(self, requests: list[FeatureRequest], *, read: str = "all") -> tuple[np.ndarray, list[_Job]]:
        """(features in request order, the job that served each request); `read`: which content-cache
        entries may serve a request (all | pinned | none)."""
        self.stats["requests"] += len(requests)
        jobs = []
        for r in requests:
            tokens = self.tokens(r.transcript)
            deltas = self._effective_deltas(r.svf_deltas)
            jobs.append(_Job(tokens, deltas, self.cache.key(tokens, deltas) if self.cache else None))
        unique: dict[tuple[bytes, bytes | None], _Job] = {}
        sources: list[_Job] = []  # request i is served by sources[i] (identical requests computed once)
        for job in jobs:
            ident = (job.tokens.tobytes(), None if job.deltas is None else job.deltas.tobytes())
            if ident not in unique:
                if self.cache is not None and read != "none":
                    assert job.key is not None  # every job has a key when there is a cache
                    job.feature = self.cache.get(job.key) if read == "all" else self.cache.pinned(job.key)
                unique[ident] = job
            sources.append(unique[ident])
        todo = [j for j in unique.values() if j.feature is None]
        plain = [j for j in todo if j.deltas is None]
        adapted = [j for j in todo if j.deltas is not None]
        if self._partial_svf:
            # Candidates need the activations entering the first adapted layer for every token.
            by_tokens: dict[bytes, _Job] = {}
            for job in adapted:
                by_tokens.setdefault(job.tokens.tobytes(), _Job(job.tokens, None, None))
            base = plain + [b for k, b in by_tokens.items() if not any(p.tokens.tobytes() == k for p in plain)]
            self._run_base(base, want_entering=True)
            entering = {b.tokens.tobytes(): b.entering for b in base}
            for job in adapted:
                job.entering = entering[job.tokens.tobytes()]
        else:
            self._run_base(plain, want_entering=False)
        self._run_svf(adapted)
        if self.cache is not None:
            # every job has a key (there is a cache) and, after the passes above, its feature
            self.cache.put_many([(cast(str, j.key), cast(np.ndarray, j.feature)) for j in todo])
        out = np.empty((len(jobs), self.hidden_size), dtype=np.float32)
        for i, source in enumerate(sources):
            out[i] = source.feature
        return out, sources

    def _effective_deltas(self, deltas: np.ndarray | None) -> np.ndarray | None:
        if self.svf is None or deltas is None:
            return None
        deltas = np.asarray(deltas, dtype=np.float64).ravel()
        if deltas.size != self.svf.size:
            raise FeatureError(f"SVF offsets have {deltas.size} numbers, the configured matrices need {self.svf.size}")
        return None if self.svf.is_identity(deltas) else deltas

    @property
    def _adapter(self) -> SVFAdapter:
        """The SVF adapter, on the paths that run only with one (effective offsets, the partial SVF pass)."""
        assert self.svf is not None
        return self.svf

    def _feature_index(self, length: int) -> int | None:
        return _index(length, self.token_position)

    # ------------------------------------------------------------------ base pass (plain backbone)
    def _run_base(self, jobs: list[_Job], *, want_entering: bool) -> None:
        if not jobs:
            return
        # Batch by the tokens each job will compute (its length minus the prefix it can reuse now), so
        # similar widths share a batch, and plan again after every batch: a job may then reuse a prompt
        # that an earlier batch of this call computed (a later turn extends its earlier turn), and its
        # width is what is left after that reuse, not its length (measured on a recording's transcripts:
        # planned once by length, 43% of the batch slots were padding; benchmarks/recorded_states_threads.py).
        todo = list(range(len(jobs)))
        while todo:
            pasts = [self._reusable(jobs[i], want_entering) for i in todo]
            first = length_batches([len(jobs[i].tokens) - p for i, (_, p) in zip(todo, pasts, strict=True)],
                                   self.max_batch, self.max_padding)[0]
            self._base_batch([jobs[todo[k]] for k in first], want_entering, [pasts[k] for k in first])
            chosen = set(first)
            todo = [i for k, i in enumerate(todo) if k not in chosen]

    def _reusable(self, job: _Job, want_entering: bool) -> tuple[PrefixEntry | None, int]:
        """The stored prompt whose KV this job can reuse, and how many of its tokens."""
        entry, common = self.prefix_store.lookup(job.tokens) if self.prefix_store is not None else (None, 0)
        # The feature tokens themselves must be recomputed: their final hidden states are not in a KV cache.
        indices = [_index(len(job.tokens), p) for p in (self.token_position, *self._other_positions)]
        assert None not in indices  # self.tokens() refused prompts without them
        reuse = min(common, *cast("list[int]", indices))
        if entry is None or reuse <= 0 or (want_entering and entry.entering is None):
            return None, 0
        return entry, reuse

    def _base_batch(self, jobs: list[_Job], want_entering: bool,
                    pasts: list[tuple[PrefixEntry | None, int]] | None = None) -> None:
        device = self.backbone.device
        if pasts is None:
            pasts = [self._reusable(job, want_entering) for job in jobs]
        past_len = max(p for _, p in pasts)
        new_lens = [len(j.tokens) - p for j, (_, p) in zip(jobs, pasts, strict=True)]
        width = max(new_lens)
        batch = len(jobs)
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        position_ids = torch.zeros((batch, width), dtype=torch.long)
        mask = torch.zeros((batch, past_len + width), dtype=torch.long)
        for i, (job, (_, p)) in enumerate(zip(jobs, pasts, strict=True)):
            n = new_lens[i]
            input_ids[i, :n] = torch.as_tensor(job.tokens[p:])
            position_ids[i] = torch.arange(p, p + width)
            mask[i, past_len - p : past_len + n] = 1
        cache = self._padded_cache(pasts, past_len)
        padded = batch > 1 and (len(set(new_lens)) > 1 or len({p for _, p in pasts}) > 1)
        captured: list[torch.Tensor] = []
        hook = None
        if want_entering:
            layer = self.backbone.layers[self._adapter.first_adapted_layer]
            hook = layer.register_forward_pre_hook(
                lambda _m, args, kwargs: captured.append(args[0] if args else kwargs["hidden_states"]), with_kwargs=True
            )
        try:
            out = self.backbone.decoder(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device) if padded else None,
                position_ids=position_ids.to(device),
                past_key_values=cache,
                use_cache=True,
            )
        finally:
            if hook is not None:
                hook.remove()
        self.stats["forward_passes"] += 1
        self.stats["computed_tokens"] += sum(new_lens)
        self.stats["reused_tokens"] += sum(p for _, p in pasts)
        hidden = out.last_hidden_state
        kv = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        for i, (job, (entry, p)) in enumerate(zip(jobs, pasts, strict=True)):
            n = new_lens[i]
            index = self._feature_index(len(job.tokens))
            assert index is not None  # self.tokens() refused prompts without one
            job.feature = _to_numpy(hidden[i, index - p])
            if self._other_positions:
                job.others = {q: _to_numpy(hidden[i, cast(int, _index(len(job.tokens), q)) - p])
                              for q in self._other_positions}
            if want_entering:
                rows = captured[0][i, :n]
                if entry is None:
                    job.entering = rows
                else:
                    assert entry.entering is not None  # _reusable(want_entering=True) skips entries without
                    job.entering = torch.cat([entry.entering[:p], rows])
            if self.prefix_store is not None:
                own = slice(past_len - p, past_len + n)
                # A lone row owns the whole KV tensor: store views of it. Rows of a batch are copied out,
                # so an entry never keeps the other rows' memory alive.
                def take(t: torch.Tensor, i: int = i, own: slice = own) -> torch.Tensor:
                    # runs in this iteration; its defaults bind the row anyway
                    return t[i, :, own] if batch == 1 else t[i, :, own].clone()
                self.prefix_store.add(PrefixEntry(job.tokens, [(take(k), take(v)) for k, v in kv], job.entering))

    def _padded_cache(self, pasts: list[tuple[PrefixEntry | None, int]], past_len: int) -> DynamicCache:
        if past_len == 0:
            return DynamicCache(config=self.backbone.model.config)
        if len(pasts) == 1:  # one row: the stored tensors as they are (the cache concatenates, never writes in place)
            entry, p = pasts[0]
            assert entry is not None  # a row reusing p > 0 tokens has its entry (_reusable)
            return DynamicCache([(k[None, :, :p], v[None, :, :p]) for k, v in entry.kv])
        layers = []
        reference = next(e for e, p in pasts if p == past_len)
        assert reference is not None  # a row reusing p > 0 tokens has its entry (_reusable)
        for layer_index, (k_ref, v_ref) in enumerate(reference.kv):
            keys = k_ref.new_zeros((len(pasts), k_ref.shape[0], past_len, k_ref.shape[2]))
            values = v_ref.new_zeros((len(pasts), v_ref.shape[0], past_len, v_ref.shape[2]))
            for i, (entry, p) in enumerate(pasts):
                if p:
                    assert entry is not None  # a row reusing p > 0 tokens has its entry (_reusable)
                    keys[i, :, past_len - p :] = entry.kv[layer_index][0][:, :p]
                    values[i, :, past_len - p :] = entry.kv[layer_index][1][:, :p]
            layers.append((keys, values))
        return DynamicCache(layers)

    # ------------------------------------------------------------------ SVF pass (one row per candidate)
    def _run_svf(self, jobs: list[_Job]) -> None:
        for group in length_batches([len(j.tokens) for j in jobs], self.max_batch, self.max_padding):
            self._svf_batch([jobs[i] for i in group])

    def _svf_batch(self, jobs: list[_Job]) -> None:
        device = self.backbone.device
        lengths = [len(j.tokens) for j in jobs]
        width = max(lengths)
        mask = torch.zeros((len(jobs), width), dtype=torch.long)
        for i, n in enumerate(lengths):
            mask[i, :n] = 1
        position_ids = torch.arange(width)[None].expand(len(jobs), width)
        kwargs: dict[str, Any] = {"attention_mask": mask.to(device) if len(set(lengths)) > 1 else None}
        if self._partial_svf:
            # _features gave every candidate the activations entering the first adapted layer
            entering = [cast(torch.Tensor, j.entering) for j in jobs]
            embeds = entering[0].new_zeros((len(jobs), width, self.hidden_size))
            for i, rows in enumerate(entering):
                embeds[i, : lengths[i]] = rows
            kwargs["inputs_embeds"] = embeds
        else:
            ids = torch.full((len(jobs), width), self.pad_id, dtype=torch.long)
            for i, job in enumerate(jobs):
                ids[i, : lengths[i]] = torch.as_tensor(job.tokens)
            kwargs["input_ids"] = ids.to(device)
        decoder = self.backbone.decoder
        all_layers = decoder.layers
        self._adapter.set_rows([j.deltas for j in jobs])
        try:
            if self._partial_svf:
                decoder.layers = torch.nn.ModuleList(list(all_layers)[self._adapter.first_adapted_layer :])
            out = decoder(position_ids=position_ids.to(device), use_cache=False, **kwargs)
        finally:
            decoder.layers = all_layers
            self._adapter.clear()
        self.stats["forward_passes"] += 1
        self.stats["svf_rows"] += len(jobs)
        for i, job in enumerate(jobs):
            job.feature = _to_numpy(out.last_hidden_state[i, self._feature_index(lengths[i])])

    def _partial_svf_matches_full(self) -> bool:
        """Self-check: layers rerun from cached activations give the same feature as the full forward."""
        rng = np.random.default_rng(0)
        deltas = rng.normal(0.0, 0.05, self._adapter.size)
        text = "Check the partial SVF path."
        with torch.inference_mode():
            job = _Job(self.tokens(text), deltas, None)
            base = _Job(job.tokens, None, None)
            store, self.prefix_store = self.prefix_store, None
            try:
                self._base_batch([base], want_entering=True)
                job.entering = base.entering
                self._svf_batch([job])
            finally:
                self.prefix_store = store
        self.stats = {k: 0 for k in self.stats}
        full = self.reference_feature(text, deltas)
        return bool(np.max(np.abs(job.feature - full)) <= 1e-4 * max(1.0, float(np.max(np.abs(full)))))


def _index(length: int, position: int) -> int | None:
    """The index of token `position` (negative: from the end) in a prompt of `length` tokens; None outside."""
    index = length + position if position < 0 else position
    return index if 0 <= index < length else None


def _pad_id(tokenizer: Any) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if candidate is not None:
            return int(candidate[0] if isinstance(candidate, (list, tuple)) else candidate)
    return 0


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).cpu().numpy().copy()
