"""Lua scripts: each runs atomically inside Redis, so one script is one round trip with no race.

Key layout of one run (``ns`` keeps runs apart in one Redis):

* ``ns:s:KEY``       hash {v: value json, q: commit seq} - state for unsafe, CFLog, Arcus, Boki
* ``ns:log:I``       hash step -> record - CFLog/Arcus per-instance log ("r<seq>|json", "w<seq>")
* ``ns:lseq``, ``ns:steps:I``, ``ns:lr:ID`` - the shared log: sequencer, tag index by instance,
  record storage (Boki); Halfmoon keeps each record inline in ``ns:hms:I`` (its instance stream)
* ``ns:mv:KEY``      sorted set of versions (Halfmoon's multi-version store)
* ``ns:b:KEY`` + ``ns:b:KEY:ops``, ``ns:rlog:I``, ``ns:intent:I`` - Beldi-style rows and logs
* ``ns:lock:KEY``    ``instance|generation`` owning a declared key (per-key serialisation)
* ``ns:gen:ROOT``    the admission generation of a root instance: the fence. Every script that
  changes state for an execution first checks that this key still holds the execution's
  generation; log GC deletes it (atomically with the logs), so an execution stalled past GC,
  or one superseded by a re-admission, can never apply a write its log no longer remembers
* ``ns:done``        sorted set instance -> finish time (log garbage collection)
* ``ns:req:I``       hash: request record of an idempotency key / async submission
* ``ns:protocol``    the protocol the namespace is bound to
* ``P:q:SLOT``, ``P:proc:WID``, ``P:lease:WID``, ``P:workers``, ``P:reply:CALL`` - the runtime's
  queues, processing lists, worker leases and replies (``P`` = platform name)
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
#: x = the invocation's result (first one wins). ARGV[1] is how a commit is pushed to FCCache:
#: '' no cache; 'a' broadcast on KEYS[3] to every worker (Arcus's default); 'k' .. CHANNEL only
#: to the workers that cache the key (``arcus-keys``, issue 44): a read from Redis registers
#: CHANNEL in ``SKEY|c`` and a write publishes on the channels registered there. KEYS[4] is
#: the instance's generation key (the fence, checked before anything is applied), ARGV[2] the
#: execution's generation.
#: ARGV[3], ARGV[4]: the execution's id and this batch's number ('' = unordered). An execution
#: that pipelines its batches (several in flight on one connection, issue 44) numbers them; a
#: batch is applied only if every earlier batch of that execution was (field ``b:ID`` of the
#: log counts them), so a lost, refused or conflicting batch stops every later one in Redis
#: itself, whatever the client saw.
CFLOG_FLUSH = """
if redis.call('GET', KEYS[4]) ~= ARGV[2] then return {'fenced', '', 0} end
local log = KEYS[1]
local mode = string.sub(ARGV[1], 1, 1)
local chan = string.sub(ARGV[1], 2)
local publish = mode ~= ''
local order = nil
if ARGV[3] ~= '' then
  order = 'b:' .. ARGV[3]
  if (redis.call('HGET', log, order) or '0') ~= ARGV[4] then return {'gap', '', 0} end
end
local function done(status, detail, maxseq)
  if order then redis.call('HSET', log, order, tonumber(ARGV[4]) + 1) end
  return {status, detail, maxseq}
end
local maxseq = 0
local i = 5
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
      local msg = seq .. '|' .. skey .. '|' .. val
      if mode == 'a' then redis.call('PUBLISH', KEYS[3], msg)
      elseif mode == 'k' then
        for _, c in ipairs(redis.call('SMEMBERS', skey .. '|c')) do
          redis.call('PUBLISH', c, msg)
        end
      end
      maxseq = math.max(maxseq, seq)
    end
  elseif kind == 'g' then
    local cur = redis.call('HGET', log, step)
    if cur then return done('logged', cur, maxseq) end
    local h = redis.call('HMGET', skey, 'q', 'v')
    local payload = 'r' .. (h[1] or '0') .. '|' .. (h[2] or 'null')
    redis.call('HSET', log, step, payload)
    if mode == 'k' then redis.call('SADD', skey .. '|c', chan) end
    return done('read', payload, maxseq)
  elseif kind == 'x' then
    redis.call('HSETNX', log, 'res', val)
    return done('res', redis.call('HGET', log, 'res'), maxseq)
  end
end
return done('ok', '', maxseq)
"""

#: the shared log's ordering step (Boki's sequencer + tag index; all of Halfmoon's append, one
#: round trip as in Halfmoon, whose functions append through their node's log engine): the record
#: goes into the instance's tagged stream (field = step, ``seq|body``), conditional on (instance,
#: step) so that a retry finds the first attempt's record instead of appending a second one, and,
#: for a Halfmoon write to a read-optimised object, into that object's version index at its log
#: position, which is what log-free reads look up.
#: KEYS: sequencer, the instance's stream, fence, object index (unused without a member).
#: ARGV: step, body, generation, version member ('' = none)
SHARED_LOG_ORDER = """
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return '!fenced' end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur then return cur end
local seq = redis.call('INCR', KEYS[1])
local rec = seq .. '|' .. ARGV[2]
redis.call('HSET', KEYS[2], ARGV[1], rec)
if ARGV[4] ~= '' then redis.call('ZADD', KEYS[4], seq * 1024, ARGV[4]) end
return rec
"""

#: apply a logged write to the materialised state only if it is newer than what is there
APPLY_IF_NEWER = """
if redis.call('GET', KEYS[2]) ~= ARGV[3] then return -1 end
local q = tonumber(redis.call('HGET', KEYS[1], 'q') or '0')
if q < tonumber(ARGV[2]) then redis.call('HSET', KEYS[1], 'v', ARGV[1], 'q', ARGV[2]) end
return 1
"""

#: Beldi's atomic "update the row and append to its log" in one conditional operation
BELDI_WRITE = """
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return -1 end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
return 1
"""

#: take every key for instance ARGV[1] of generation ARGV[2], or none. A lock's value is
#: ``instance|generation``; a key is free, held by this instance, or held by an ancestor
#: (instance ids of children are PARENT.STEP) of the same generation. KEYS[1] is the fence
#: ({-1} when fenced), KEYS[2] the commit sequence, returned on success so the caller's cache
#: token covers the previous holder's writes, KEYS[3] the hash holding the instance's result:
#: once it is logged, nothing is taken ({2, seq}): a late execution (stalled, then resumed after
#: the first one finished and gave the keys back) would otherwise take keys that no message of
#: the instance is left to give back if it dies; and what this generation still holds is given
#: back (an execution whose release was lost to a Redis restart re-runs and lands here). The lock
#: keys follow. ARGV[3]: the caller's FCCache channel ('' = none), stamped with the returned
#: sequence as a barrier (see :mod:`schedlab.arcus.fccache`).
LOCK_ACQUIRE = """
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return {-1, ''} end
local inst = ARGV[1]
local suffix = '|' .. ARGV[2]
if redis.call('HEXISTS', KEYS[3], 'res') == 1 then
  for i = 4, #KEYS do
    if redis.call('GET', KEYS[i]) == inst .. suffix then redis.call('DEL', KEYS[i]) end
  end
  local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
  if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], 'b|' .. seq) end
  return {2, seq}
end
for i = 4, #KEYS do
  local owner = redis.call('GET', KEYS[i])
  if owner then
    local oinst = string.match(owner, '^(.*)|')
    local same_gen = string.sub(owner, -#suffix) == suffix
    if not (same_gen and (oinst == inst or string.sub(inst, 1, #oinst + 1) == oinst .. '.')) then
      return {0, owner}
    end
  end
end
for i = 4, #KEYS do
  if not redis.call('GET', KEYS[i]) then redis.call('SET', KEYS[i], inst .. suffix) end
end
local seq = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], 'b|' .. seq) end
return {1, seq}
"""

#: give back the keys held as ``instance|generation`` = ARGV[1] (never a key another instance,
#: or a newer admission of this one, took meanwhile). Not fenced: an execution found fenced
#: gives back what its generation holds, or a lock taken just before GC would stay forever
LOCK_RELEASE = """
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then redis.call('DEL', KEYS[i]) end
end
return 1
"""

#: move a worker's processing list (KEYS[1]) to other workers' queues, bumping the delivery
#: attempt in the ``a<n>:`` prefix; unless forced, only when its lease (KEYS[2]) is gone (and
#: then the worker is also unregistered).
#: ARGV: platform, slots, the worker's slot, worker id, force
REDELIVER = """
if ARGV[5] ~= '1' and redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
local msgs = redis.call('LRANGE', KEYS[1], 0, -1)
local slots = tonumber(ARGV[2])
local dead = tonumber(ARGV[3])
for i, raw in ipairs(msgs) do
  local n, body = string.match(raw, '^a(%d+):(.*)$')
  if n then
    n = tonumber(n) + 1
    local target = (dead + i + n) % slots
    if target == dead and slots > 1 then target = (target + 1) % slots end
    redis.call('RPUSH', ARGV[1] .. ':q:' .. target, 'a' .. n .. ':' .. body)
  end
end
redis.call('DEL', KEYS[1])
-- a forced sweep (the supervisor saw the process die) keeps the worker registered: Redis may
-- still complete a BLMOVE the dead worker had blocked in, and the lease scan must find that
if ARGV[5] ~= '1' then redis.call('SREM', KEYS[3], ARGV[4]) end
return #msgs
"""

#: an idempotency key's request record: created on first use; a reuse with a different request
#: (digest ARGV[1]) is refused. KEYS[2] is the instance's generation (the fence), created with
#: ARGV[5] unless the request is already answered. Returns {state, digest, generation}
REQUEST_BEGIN = """
local cur = redis.call('HGET', KEYS[1], 'digest')
if cur and cur ~= ARGV[1] then return {'mismatch', cur, ''} end
if not cur then
  redis.call('HSET', KEYS[1], 'digest', ARGV[1], 'fn', ARGV[2], 'protocol', ARGV[3],
             'state', 'pending', 'created', ARGV[4])
end
local state = redis.call('HGET', KEYS[1], 'state')
local gen = redis.call('GET', KEYS[2])
if not gen and state ~= 'done' then
  redis.call('SET', KEYS[2], ARGV[5])
  gen = ARGV[5]
end
return {state, ARGV[1], gen or ''}
"""

#: an execution's reply, its done-mark and request record, and the removal of its message, in
#: one script; a fenced execution only drops its message. KEYS: fence, reply list, done set,
#: request record, processing list. ARGV: generation, reply, instance ('' = not done), now,
#: number of request-record fields n, n field/value pairs, the raw message
REPLY = """
local n = tonumber(ARGV[5])
local raw = ARGV[6 + 2 * n]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  redis.call('LREM', KEYS[5], 1, raw)
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], 300)
if ARGV[3] ~= '' then redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[3]) end
for i = 0, n - 1 do redis.call('HSET', KEYS[4], ARGV[6 + 2 * i], ARGV[7 + 2 * i]) end
redis.call('LREM', KEYS[5], 1, raw)
return 1
"""

#: a parent waiting for its child's reply asks where the child is (issue 44: a parent used to
#: give up after 60 s and fail half-way through a saga while the child's message was alive).
#: KEYS[1] the root's fence, KEYS[2] the reply list, KEYS[3] the platform's workers set.
#: ARGV[1] generation, ARGV[2] platform prefix, ARGV[3] number of slots, ARGV[4] call id.
#: Returns -1 fenced (the parent is superseded), 1 replied, 2 queued or running, 0 nowhere (the
#: message was lost, e.g. with a Redis that does not persist: the parent sends it again)
CHILD_WHERE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('LLEN', KEYS[2]) > 0 then return 1 end
local needle = '"call_id":"' .. ARGV[4] .. '"'
local function holds(list)
  for _, raw in ipairs(redis.call('LRANGE', list, 0, -1)) do
    if string.find(raw, needle, 1, true) then return true end
  end
  return false
end
for slot = 0, tonumber(ARGV[3]) - 1 do
  if holds(ARGV[2] .. ':q:' .. slot) then return 2 end
end
for _, wid in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if holds(ARGV[2] .. ':proc:' .. wid) then return 2 end
end
return 0
"""

#: admit a root instance given by the caller (not a fresh id): its generation, created if absent
ADMIT = """
local g = redis.call('GET', KEYS[1])
if g then return g end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
"""

#: a state change a baseline makes with a plain command, behind the same fence: {0} when fenced,
#: else {1, reply}. KEYS[1] fence, ARGV[1] generation, ARGV[2..] the command
FENCED_CALL = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
return {1, redis.call(unpack(ARGV, 2))}
"""

#: bind a namespace to one protocol (first use wins); returns the bound protocol
BIND_PROTOCOL = """
local cur = redis.call('GET', KEYS[1])
if not cur then redis.call('SET', KEYS[1], ARGV[1]); return ARGV[1] end
return cur
"""

_SOURCES = dict(cflog_flush=CFLOG_FLUSH, shared_log_order=SHARED_LOG_ORDER,
                apply_if_newer=APPLY_IF_NEWER, beldi_write=BELDI_WRITE,
                lock_acquire=LOCK_ACQUIRE, lock_release=LOCK_RELEASE, redeliver=REDELIVER,
                request_begin=REQUEST_BEGIN, bind_protocol=BIND_PROTOCOL, reply=REPLY,
                admit=ADMIT, fenced_call=FENCED_CALL, child_where=CHILD_WHERE)
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
