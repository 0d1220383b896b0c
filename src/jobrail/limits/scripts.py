"""The Redis backend's scripts, put together from the limit kinds' Lua fragments.

Each script is a prelude (the clock, number formatting, garbage-collecting TTLs), every
kind's fragment (``LimitKind.LUA``, filling the local table ``KINDS``) and a driver
that walks the call's items and hands each to its kind. A job's admission stays one
script: all of its items are evaluated first, and their effects applied only if every
one of them allowed it (or, when one said no, the reservations of those that reserve).

Per item, the arguments are its kind, the number of its keys (``LimitKind.redis_keys``,
which come in KEYS in the same order) and the kind's own arguments.

The admit, release and extend scripts also come batched (``Scripts.admit_batch``...):
one script runs many calls of the same script, each as it would run alone, so that a
batch of calls is one command for the client to pack and one reply for it to parse.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jobrail.limits.kind import LimitKind

_PRELUDE = """
local function clock(override)
  if override ~= '' then
    local ms = tonumber(override)
    return ms, math.floor(ms * 1000)
  end
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + us / 1000, s * 1000000 + us
end
local function num(x) return string.format('%.17g', x) end
local function gc(key, ms) redis.call('PEXPIRE', key, math.max(1, math.ceil(ms)) + 1000) end
local KINDS = {}
local ki = 1
local function keys_of(nk)
  local k = {}
  for j = 1, nk do
    k[j] = KEYS[ki]
    ki = ki + 1
  end
  return k
end
"""

# ARGV: now_override, holder, dry_run, reserve, n, owner, take_over, then per item:
# kind, key count, 4 arguments.
# With reserve = '1', a denied admission applies the reservations of the items that
# made one. A lock or slots held by holders starting with `owner` (an earlier admission
# of the same job: '<job id>/') are taken from them with take_over = '1', else reported
# as `own`.
# Out: allowed, fence, now (ms), then per item: ok, remaining, retry_after, reserved,
# epoch, own, until, holder (the last two '' when the kind gives none).
_ADMIT = """
local now, now_us = clock(ARGV[1])
local c = {now = now, now_us = now_us, holder = ARGV[2], reserve = ARGV[4] == '1',
           owner = ARGV[6], take_over = ARGV[7] == '1'}
function c.owned(who) return c.owner ~= '' and string.sub(who, 1, #c.owner) == c.owner end
local dry, n = ARGV[3] == '1', tonumber(ARGV[5])
local out, takes, holds, all = {0, '', num(now)}, {}, {}, true
local a = 8
for i = 1, n do
  local kind, k = KINDS[ARGV[a]], keys_of(tonumber(ARGV[a + 1]))
  local p = {ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]}
  a = a + 6
  local ok, remaining, retry, reserved, epoch, own, take, hold, till, who = kind.admit(c, k, p)
  if ok == 0 then all = false end
  if take then takes[#takes + 1] = take end
  if hold then holds[#holds + 1] = hold end
  out[#out + 1] = ok
  out[#out + 1] = num(remaining)
  out[#out + 1] = num(retry)
  out[#out + 1] = reserved
  out[#out + 1] = epoch
  out[#out + 1] = own
  out[#out + 1] = till and num(till) or ''
  out[#out + 1] = who or ''
end
if all then out[1] = 1 end
if not dry then
  if all then
    for _, take in ipairs(takes) do
      local fence = take()
      if fence then out[2] = fence end
    end
  else
    for _, hold in ipairs(holds) do hold() end
  end
end
return out
"""

# ARGV: refund, holder, n, then per item: kind, key count, 3 arguments.
_RELEASE = """
local c = {refund = ARGV[1] == '1', holder = ARGV[2]}
local a = 4
for i = 1, tonumber(ARGV[3]) do
  local kind, k = KINDS[ARGV[a]], keys_of(tonumber(ARGV[a + 1]))
  local p = {ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]}
  a = a + 5
  if kind.release then kind.release(c, k, p) end
end
return 1
"""

# ARGV: now_override, holder, n, then per item: kind, key count, ttl (ms). Out: 1 if
# every item is still held (each one held is renewed all the same).
_EXTEND = """
local now, now_us = clock(ARGV[1])
local c = {now = now, now_us = now_us, holder = ARGV[2]}
local held, a = 1, 4
for i = 1, tonumber(ARGV[3]) do
  local kind, k = KINDS[ARGV[a]], keys_of(tonumber(ARGV[a + 1]))
  local ttl = tonumber(ARGV[a + 2])
  a = a + 3
  if not (kind.extend and kind.extend(c, k, ttl)) then held = 0 end
end
return held
"""

# ARGV: kind. KEYS: the item's keys. Out: holder, until (ms), holder, until...
_HOLDERS = """
local kind = KINDS[ARGV[1]]
if not kind.holders then return {} end
return kind.holders({}, keys_of(#KEYS))
"""


# The batched form of a driver, which is `call` here, a function of its own ARGV.
# ARGV: the number of calls, then per call: its key count and its arguments joined by
# SEPARATOR (one argument per call: a client packs each argument of a command on its
# own, and that, not the command, is most of what a call costs it). KEYS: the calls'
# keys, call after call. Out: per call, what the driver returns, or the error it raised.
# A call that raises (WRONGTYPE on one of its keys, say) fails alone: its effects so
# far stay, as they would in a script of its own, and the next call starts at its own
# keys whatever the failed one consumed of KEYS. Errors keep their code (WRONGTYPE,
# OOM...) so that the client raises what it would raise for the call alone; one without
# a code (a Lua runtime error) gets ERR, as Redis gives it to a script that fails.
_BATCH = """
local results, a = {}, 2
for i = 1, tonumber(ARGV[1]) do
  local nk, joined = tonumber(ARGV[a]), ARGV[a + 1]
  local own, from = {}, 1
  while true do
    local at = string.find(joined, '\\31', from, true)
    if not at then
      own[#own + 1] = string.sub(joined, from)
      break
    end
    own[#own + 1] = string.sub(joined, from, at - 1)
    from = at + 1
  end
  local first = ki
  local ok, result = pcall(call, own)
  if not ok then
    if type(result) == 'table' then result = result.err or tostring(result) end
    result = tostring(result)
    if not string.match(result, '^%u+ ') then result = 'ERR ' .. result end
    result = {err = result}
  end
  results[i] = result
  ki = first + nk
  a = a + 2
end
return results
"""
SEPARATOR = "\x1f"


def _batched(driver: str) -> str:
    return "local function call(ARGV)\n" + driver + "end\n" + _BATCH


@dataclass(frozen=True, slots=True)
class Scripts:
    admit: str
    release: str
    extend: str
    holders: str
    admit_batch: str
    release_batch: str
    extend_batch: str


def build(kinds: Sequence[type[LimitKind[Any]]]) -> Scripts:
    fragments = _PRELUDE + "".join(kind.LUA for kind in kinds)
    return Scripts(
        admit=fragments + _ADMIT,
        release=fragments + _RELEASE,
        extend=fragments + _EXTEND,
        holders=fragments + _HOLDERS,
        admit_batch=fragments + _batched(_ADMIT),
        release_batch=fragments + _batched(_RELEASE),
        extend_batch=fragments + _batched(_EXTEND),
    )


def joined(args: Sequence[str]) -> str | None:
    """A call's arguments as the batched scripts take them, or None if one of them holds
    the separator (that call is sent on its own)."""
    text = SEPARATOR.join(args)
    return text if text.count(SEPARATOR) == len(args) - 1 else None


def batch_args(calls: Sequence[tuple[list[str], str]]) -> tuple[list[str], list[str]]:
    """The keys and arguments of one batched script for `calls` (each call's keys, as the
    unbatched script takes them, and its arguments `joined`)."""
    keys: list[str] = []
    args = [str(len(calls))]
    for call_keys, call_args in calls:
        keys += call_keys
        args += [str(len(call_keys)), call_args]
    return keys, args
