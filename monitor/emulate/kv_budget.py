"""How many tokens a rank's KV pool promises to its requests: SGLang's admission by tokens and its decode retraction.

SGLang (0.5.23) sizes the KV pool once, at start (`max_total_num_tokens`, from `--mem-fraction-static` or
`--max-total-tokens`), and admits by tokens as well as by slots:

- a new request needs its uncached prompt plus all it may still write (`max_new_tokens`, clipped at
  `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`, 4096) free, after what the running requests are still expected to
  write is set aside (schedule_policy.PrefillAdder: `add_one_req`, `rem_total_tokens`);
- a running request is expected to write only `new_token_ratio` of what it may still write, unless the client
  set `ignore_eos` (then all of it). The ratio starts at 0.7 and falls by (0.7 - 0.098) / 600 on every decode
  step that retracted nothing, to 0.098 (`NewTokenRatioTracker`: SGLANG_INIT_NEW_TOKEN_RATIO,
  SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS);
- so a busy server with long answers admits more than its pool holds once they are all written. When the next
  decode step no longer fits (`check_decode_mem`), it retracts the running requests with the fewest output
  tokens (the longest prompt first among equals) until it does, always keeping one (`retract_decode`), and sets
  the ratio to what the requests it kept have written plus 20 steps each over what they may write
  (`estimate_new_token_ratio_after_retract`). Retractions are SGLang's own, in healthy serving.
- A PD decode server preallocates a transferred request's KV when its prompt fits beside 512 tokens kept for each
  request it holds (`--num-reserved-decode-tokens`, disaggregation/decode.py `_allocatable_token_budgets`).

These are pure functions over token counts; prefix_cache.KVCache applies them to a rank's requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

INIT_NEW_TOKEN_RATIO: Final = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO x --schedule-conservativeness 1.0
MIN_NEW_TOKEN_RATIO: Final = INIT_NEW_TOKEN_RATIO * 0.14  # x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY: Final = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600  # per decode step
RETRACT_DECODE_STEPS: Final = 20  # SGLANG_RETRACT_DECODE_STEPS
CLIP_MAX_NEW_TOKENS: Final = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
RESERVED_DECODE_TOKENS: Final = 512  # --num-reserved-decode-tokens (PD decode)


@dataclass(frozen=True)
class Writing:
    """What one admitted request holds and may still write, in tokens."""

    held: int  # prompt and output so far in the pool
    written: int  # output tokens so far
    max_new: int  # the most it may write in all (max_new_tokens)
    ignore_eos: bool  # the client asked for all of max_new_tokens

    def left(self) -> int:
        """What it may still write, as SGLang counts it for the budget (clipped)."""
        return clipped(self.max_new - self.written)

    def expected(self, ratio: float) -> float:
        """Tokens set aside for what it is still expected to write (PrefillAdder's running-request offset)."""
        return self.left() * (1.0 if self.ignore_eos else ratio)


def clipped(tokens: int) -> int:
    """Tokens still to write as the budget counts them: none below 0, at most CLIP_MAX_NEW_TOKENS."""
    return min(max(tokens, 0), CLIP_MAX_NEW_TOKENS)


def decayed(ratio: float, steps: float) -> float:
    """The ratio after `steps` decode steps that retracted nothing."""
    return max(ratio - NEW_TOKEN_RATIO_DECAY * max(steps, 0.0), MIN_NEW_TOKEN_RATIO)


def admits(pool_free: float, running: list[Writing], ratio: float, extend: int, may_write: int) -> bool:
    """Whether a request whose prefill puts `extend` tokens in the pool, and that may write `may_write` more,
    fits beside the running requests (`pool_free`: tokens neither held nor lost)."""
    reserved = sum(w.expected(ratio) for w in running)
    return extend + clipped(may_write) < pool_free - reserved


def retraction(pool_free: float, decoding: list[Writing], prompts: list[int]) -> list[int]:
    """Indices (into `decoding`) that a decode step which no longer fits retracts: fewest output tokens first,
    longest prompt first among equals, until one more token each fits; at least one, never the last."""
    order = sorted(range(len(decoding)), key=lambda i: (decoding[i].written, -prompts[i]), reverse=True)
    out: list[int] = []
    free = pool_free
    while len(order) > 1 and (not out or free < len(order)):
        i = order.pop()
        out.append(i)
        free += decoding[i].held
    return out


def ratio_after_retraction(kept: list[Writing]) -> float:
    """The new-token ratio after a retraction: what the kept requests wrote, plus 20 steps each, over what they
    may write."""
    written = sum(w.written for w in kept)
    may = sum(w.max_new for w in kept)
    return min(1.0, (written + RETRACT_DECODE_STEPS * len(kept)) / (may + 1))


def decode_admits(pool_free: float, holding: int, prompt: int) -> bool:
    """A PD decode server preallocates a transferred prompt's KV beside 512 tokens per request it holds."""
    return prompt <= pool_free - RESERVED_DECODE_TOKENS * holding
