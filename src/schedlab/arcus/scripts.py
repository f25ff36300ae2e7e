"""Lua scripts: each runs atomically inside Redis, so one script is one round trip with no race.

Key layout of one run (``ns`` keeps runs apart in one Redis):

* ``ns:s:KEY``       hash {v: value json, q: commit seq} - state for unsafe, CFLog, Arcus, Boki
* ``ns:log:I``       hash step -> record - CFLog/Arcus per-instance log ("r<seq>|json", "w<seq>")
* ``ns:lseq``, ``ns:steps:I``, ``ns:lr:ID`` - the shared log (Boki/Halfmoon): sequencer, tag
  index by instance, record storage
* ``ns:mv:KEY``      sorted set of versions (Halfmoon's multi-version store)
* ``ns:b:KEY`` + ``ns:b:KEY:ops``, ``ns:rlog:I``, ``ns:intent:I`` - Beldi-style rows and logs
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import redis

#: CFLog's coordination-free flush: a batch of (kind, step, state key, value) records applied in
#: order; conditional on the per-instance log hash, so re-execution is idempotent with no
#: sequencer. kinds: r = a read already served (must match any logged read), w = a write
#: (skipped when its step is logged), g = a read served now (returns the logged value if any),
#: x = the invocation's result (first one wins).
CFLOG_FLUSH = """
local log = KEYS[1]
local publish = ARGV[1] == '1'
local maxseq = 0
local i = 2
while i <= #ARGV do
  local kind, step, skey, val = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3]
  i = i + 4
  if kind == 'r' then
    local cur = redis.call('HGET', log, step)
    if cur and cur ~= val then return {'conflict', step, maxseq} end
    if not cur then redis.call('HSET', log, step, val) end
  elseif kind == 'w' then
    local cur = redis.call('HGET', log, step)
    if cur then
      maxseq = math.max(maxseq, tonumber(string.sub(cur, 2)) or 0)
    else
      local seq = redis.call('INCR', KEYS[2])
      redis.call('HSET', skey, 'v', val, 'q', seq)
      redis.call('HSET', log, step, 'w' .. seq)
      if publish then redis.call('PUBLISH', KEYS[3], seq .. '|' .. skey .. '|' .. val) end
      maxseq = math.max(maxseq, seq)
    end
  elseif kind == 'g' then
    local cur = redis.call('HGET', log, step)
    if cur then return {'logged', cur, maxseq} end
    local h = redis.call('HMGET', skey, 'q', 'v')
    local payload = 'r' .. (h[1] or '0') .. '|' .. (h[2] or 'null')
    redis.call('HSET', log, step, payload)
    return {'read', payload, maxseq}
  elseif kind == 'x' then
    redis.call('HSETNX', log, 'res', val)
    return {'res', redis.call('HGET', log, 'res'), maxseq}
  end
end
return {'ok', '', maxseq}
"""

#: the shared log's ordering step (Boki's sequencer + tag index), conditional on (instance, step)
#: so that a retry finds the record of the first attempt instead of appending a second one
SHARED_LOG_ORDER = """
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur then return cur end
local seq = redis.call('INCR', KEYS[1])
local rec = seq .. '|' .. ARGV[2]
redis.call('HSET', KEYS[2], ARGV[1], rec)
return rec
"""

#: apply a logged write to the materialised state only if it is newer than what is there
APPLY_IF_NEWER = """
local q = tonumber(redis.call('HGET', KEYS[1], 'q') or '0')
if q < tonumber(ARGV[2]) then redis.call('HSET', KEYS[1], 'v', ARGV[1], 'q', ARGV[2]) end
return 1
"""

#: Beldi's atomic "update the row and append to its log" in one conditional operation
BELDI_WRITE = """
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
return 1
"""

_SOURCES = dict(cflog_flush=CFLOG_FLUSH, shared_log_order=SHARED_LOG_ORDER,
                apply_if_newer=APPLY_IF_NEWER, beldi_write=BELDI_WRITE)
_LOCK = threading.Lock()
_REGISTERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def scripts_for(client: redis.Redis) -> dict[str, Any]:
    """The scripts registered on ``client`` (EVALSHA, reloaded if needed), made once per client."""
    with _LOCK:
        found = _REGISTERED.get(client)
        if found is None:
            found = {name: client.register_script(src) for name, src in _SOURCES.items()}
            _REGISTERED[client] = found
        return found
