"""IFlux as a Slurm ``burst_buffer/lua`` plugin: intents in the batch script, the accelerator
tiers as Slurm burst-buffer pools, stage-in while the job is pending, stage-out before teardown.

Paper: IFlux (../shared/papers/10-iflux.md) is a scheduler plugin. Slurm (20.11+, here Debian's
22.05) ships ``burst_buffer/lua``: slurmctld calls the functions of a ``burst_buffer.lua`` that
lives beside ``slurm.conf``. :func:`install` writes that script, the compiled rule table and the
pool list, and ``job_submit.lua`` (``JOB_SUBMIT_LUA``: refuses ``#IFLUX``-only scripts, which
Slurm would never show the burst-buffer plugin); the Lua functions call this module as a
helper process:

=====================  =========================  ===========================================
Lua function           when (Slurm 22.05)         IFlux
=====================  =========================  ===========================================
slurm_bb_job_process   submission (synchronous)   parse + validate the intents, check the
                                                  pool request and that its capacity fits
                                                  the pool's total -- in Lua, no process
                                                  (``CHECK_LUA``; the helper only names a
                                                  pool for intents that ask for none)
slurm_bb_pools         startup, every 30 s        tiers as pools, read from ``pools.json``
                                                  by Lua itself; starts :func:`sweep`
                                                  (detached) only when a job left a marker
slurm_bb_setup         pending, pool granted      decide, make tier dirs (owned by the user)
slurm_bb_data_in       pending, after setup       stage inputs in (killable; source intact)
slurm_bb_real_size     after data_in              nothing
slurm_bb_paths         job starts (synchronous)   job env: ``IFLUX_MOUNTS``, ``BASH_ENV``
                                                  (copied by Lua from a file, no process)
slurm_bb_pre_run       job starts                 start the write-back daemons
slurm_bb_post_run      job ended                  stop them
slurm_bb_data_out      job ended, before teardown flush outputs; failure -> error + reason
slurm_bb_job_teardown  after stage-out, or cancel remove tiers that are durable, report
slurm_bb_get_status    ``scontrol show bbstat``   per-job phase and placements
=====================  =========================  ===========================================

A job asks for one pool with Slurm's own directive, ``#BB_LUA pool=<tier> capacity=<size>``;
Slurm keeps the job PENDING (reason ``BurstBufferResources``) until the pool has room and
returns the capacity after teardown. Slurm 22.05 tracks one pool per job, so the pool tiers a
job did not ask for have no room for it and its intents fall back along their tier chains
(ultimately the PFS). ``schedlab iflux sbatch --bb`` (:func:`pool_request`) adds the line that
places the most bytes. Transparency: ``slurm_bb_paths`` sets ``BASH_ENV`` to a generated
``enter.sh``, which bash sources before the batch script; it re-executes the script inside a
private mount namespace with the declared paths bind-mounted onto their tiers (``unshare -r``
and a second user namespace that maps the user back to their own uid when not root).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from schedlab.core.errors import BadInputError, SchedlabError
from schedlab.iflux import fastpath

POOL_TIERS = ("ramdisk", "nvme", "shared-bb", "gpu-direct")
GRANULARITY = 1 << 20
FLUSH_MASK = fastpath.STAGE_OUT




# --------------------------------------------------------------------------- the Lua script

CHECK_LUA = r"""local SPOOL = ...
-- ---- the submit check in pure Lua: a port of fastpath.read_script and job_process
-- (no process is started while slurmctld holds its job lock). Same accept/refuse, same
-- one-line messages;
-- tests/iflux/test_iflux_submit_lua.py compares the two on generated scripts.
local FEATURES = {
   {"level", {"job", "workflow", "application", "phase", "operation"}},
   {"data", {"dataset", "file", "sample"}},
   {"usage", {"input", "output", "temporary"}},
   {"sharing", {"shared", "independent"}},
   {"mode", {"read-only", "write-only", "read-write"}},
   {"consistency", {"eventual", "strong"}},
   {"pattern", {"small-random", "large-sequential", "metadata-heavy", "checkpoint"}},
}
local DEFAULTS = {level = "job", data = "dataset", sharing = "independent",
                  mode = "read-write", consistency = "eventual", pattern = "large-sequential"}
local FIELDS = {"path", "name", "level", "data", "usage", "sharing", "mode", "consistency",
                "pattern", "size", "files", "source"}
local IS_FIELD = {}
for _, f in ipairs(FIELDS) do IS_FIELD[f] = true end
local UNITS = {[""] = 1, b = 1, k = 1024, kb = 1000, kib = 1024, m = 2^20, mb = 1e6,
               mib = 2^20, g = 2^30, gb = 1e9, gib = 2^30, t = 2^40, tb = 1e12, tib = 2^40}
local SLURM_UNITS = {[""] = 1, K = 2^10, M = 2^20, G = 2^30, T = 2^40, P = 2^50}
local GRANULARITY = 1048576
local SP = "[ \t\n\v\f\r\28-\31]"  -- Python's str.strip()/split() whitespace (ASCII)

local function bad(msg, where, field)
   local s = ""
   if where and where.path then
      s = where.path
      if where.line then s = s .. ":" .. where.line end
      s = s .. ": "
   end
   if field then s = s .. "field '" .. field .. "': " end
   error({msg = s .. msg}, 0)
end

local function repr(s)  -- Python's repr() of a str (ASCII control characters escaped)
   local quote = "'"
   if string.find(s, "'", 1, true) and not string.find(s, '"', 1, true) then quote = '"' end
   local out = string.gsub(s, "[%z\1-\31\\'\"\127]", function(c)
      if c == "\\" then return "\\\\" end
      if c == quote then return "\\" .. c end
      if c == "'" or c == '"' then return c end
      if c == "\t" then return "\\t" elseif c == "\n" then return "\\n"
      elseif c == "\r" then return "\\r" end
      return string.format("\\x%02x", string.byte(c))
   end)
   return quote .. out .. quote
end

local function strip(s)
   return (string.gsub(string.gsub(s, "^" .. SP .. "+", ""), SP .. "+$", ""))
end

local WS = {[" "] = true, ["\t"] = true, ["\r"] = true, ["\n"] = true}

local function shsplit(s)  -- shlex.split (POSIX mode, no comments)
   local words, token, quoted, state, esc = {}, "", false, " ", nil
   local i, n = 1, #s
   while true do
      local c = nil
      if i <= n then c = string.sub(s, i, i) end
      i = i + 1
      if state == "'" or state == '"' then
         quoted = true
         if c == nil then error({shlex = "No closing quotation"}, 0) end
         if c == state then state = "a"
         elseif c == "\\" and state == '"' then esc = state; state = "\\"
         else token = token .. c end
      elseif state == "\\" then
         if c == nil then error({shlex = "No escaped character"}, 0) end
         if (esc == "'" or esc == '"') and c ~= "\\" and c ~= esc then token = token .. "\\" end
         token = token .. c
         state = esc
      elseif state == " " then
         if c == nil then break
         elseif WS[c] then -- skip
         elseif c == "\\" then esc = "a"; state = "\\"
         elseif c == "'" or c == '"' then state = c
         else token = c; state = "a" end
      else
         if c == nil then break
         elseif WS[c] then
            state = " "
            if token ~= "" or quoted then words[#words + 1] = token end
            token, quoted = "", false
         elseif c == "'" or c == '"' then state = c
         elseif c == "\\" then esc = "a"; state = "\\"
         else token = token .. c end
      end
   end
   if token ~= "" or quoted then words[#words + 1] = token end
   return words
end

local function split_or_bad(text, what, where)
   local ok, words = pcall(shsplit, text)
   if ok then return words end
   if type(words) == "table" and words.shlex then bad(what .. words.shlex, where) end
   error(words, 0)
end

local function directive_fields(text, where, skip)
   local words = split_or_bad(text, "cannot split directive: ", where)
   local raw, order = {}, {}
   for _, w in ipairs(words) do
      local eq = string.find(w, "=", 1, true)
      local key, value = w, nil
      if eq then key, value = string.sub(w, 1, eq - 1), string.sub(w, eq + 1) end
      if not (skip and (key == "pool" or key == "capacity")) then
         if value == nil or key == "" then bad("expected key=value, got " .. repr(w), where) end
         if raw[key] ~= nil then bad("given twice in one directive", where, key) end
         raw[key] = value
         order[#order + 1] = key
      end
   end
   return raw, order
end

local function norm_path(p)  -- str(PurePosixPath(p)) for an absolute p
   local root = "/"
   if string.sub(p, 1, 2) == "//" and string.sub(p, 3, 3) ~= "/" then root = "//" end
   local parts = {}
   for part in string.gmatch(p, "[^/]+") do
      if part ~= "." then parts[#parts + 1] = part end
   end
   return root .. table.concat(parts, "/")
end

local function parse_size(v)
   local tail = SP .. "*([a-zA-Z]*)" .. SP .. "*$"
   local num, unit = string.match(v, "^" .. SP .. "*([0-9]+)" .. tail)
   if not num then
      num, unit = string.match(v, "^" .. SP .. "*([0-9]+%.[0-9]+)" .. tail)
   end
   local mult = unit and UNITS[string.lower(unit)]
   if not mult then return nil end
   local size = tonumber(num) * mult
   if size == math.huge then
      error({msg = "OverflowError: cannot convert float infinity to integer"}, 0)
   end
   return math.floor(size)
end

local function contradiction(it)
   if it.usage == "input" and it.mode == "write-only" then
      return "mode", "an input cannot be write-only" end
   if it.usage == "output" and it.mode == "read-only" then
      return "mode", "an output cannot be read-only" end
   if it.pattern == "checkpoint" and it.mode == "read-only" then
      return "pattern", "a checkpoint is written, so it cannot be read-only" end
   if it.usage == "temporary" and it.sharing == "shared" and it.level == "workflow" then
      return "usage", "workflow-shared data outlives a job, so it cannot be temporary" end
   return nil
end

local function validate(raw, order, where)
   for _, key in ipairs(order) do
      if not IS_FIELD[key] then
         bad("unknown intent field; valid: " .. table.concat(FIELDS, ", "), where, key)
      end
   end
   if raw.path == nil then bad("Field required", where, "path") end
   if raw.usage == nil then bad("Field required", where, "usage") end
   local it = {}
   for _, f in ipairs(FEATURES) do
      local name, values = f[1], f[2]
      local value = raw[name]
      if value == nil then value = DEFAULTS[name] end
      local known, allowed = false, {}
      for j, x in ipairs(values) do
         if x == value then known = true end
         allowed[j] = "'" .. x .. "'"
      end
      if not known then
         bad("Input should be " .. table.concat(allowed, " or ") .. " (got " .. repr(value) .. ")",
             where, name)
      end
      it[name] = value
   end
   for _, name in ipairs({"path", "source"}) do
      local value = raw[name] or ""
      if value ~= "" and string.sub(value, 1, 1) ~= "/" then
         bad("Value error, must be an absolute path, got " .. repr(value), where, name)
      end
      if value ~= "" then value = norm_path(value) end
      it[name] = value
   end
   local size = raw.size or "0"
   it.size = parse_size(size)
   if not it.size then
      bad("Value error, cannot read " .. repr(size) .. " as a size (e.g. 4096, '64MiB', '2GB')",
          where, "size")
   end
   local files = raw.files or "1"
   local digits = string.match(files, "^" .. SP .. "*%+?([0-9]+)" .. SP .. "*$")
   if not digits or tonumber(digits) < 1 then
      bad("files must be an integer >= 1, got " .. repr(files), where, "files")
   end
   it.files = tonumber(digits)
   it.name = raw.name or ""
   local field, why = contradiction(it)
   if field then bad("contradicting intent: " .. why, where, field) end
   return it
end

local function parse_directive(text, where, skip)
   local raw, order = directive_fields(text, where, skip)
   if #order == 0 and skip then return nil end
   return validate(raw, order, where)
end

local KEYS = {"level", "data", "usage", "sharing", "mode", "consistency", "pattern", "path",
              "source", "size", "files", "name"}

local function check_job(intents, where)
   local seen, paths = {}, {}
   for _, it in ipairs(intents) do
      local before = seen[it.path]
      if before then
         for _, k in ipairs(KEYS) do
            if before[k] ~= it[k] then
               bad("contradicting intents for " .. it.path .. ": declared twice with different "
                   .. "usage/mode/pattern", where, "path")
            end
         end
      else
         paths[#paths + 1] = it.path
      end
      seen[it.path] = it
   end
   for _, path in ipairs(paths) do
      local parent = path
      while string.find((string.gsub(parent, "/+$", "")), "/", 1, true) do
         parent = string.match((string.gsub(parent, "/+$", "")), "^(.*)/[^/]*$")
         if parent == "" then parent = "/" end
         if seen[parent] then
            bad("intent paths " .. parent .. " and " .. path .. " are nested; declare disjoint "
                .. "directories", where, "path")
         end
         if parent == "/" then break end
      end
   end
end

local function comment_intents(line, where)
   local words = split_or_bad(string.sub(line, 8), "cannot split #SBATCH line: ", where)
   local comment = ""
   for i, w in ipairs(words) do
      if string.sub(w, 1, 10) == "--comment=" then comment = string.sub(w, 11)
      elseif w == "--comment" and i < #words then comment = words[i + 1] end
   end
   comment = strip(comment)
   if string.sub(string.lower(comment), 1, 6) ~= "iflux:" then return {} end
   local parts = {}
   for part in string.gmatch(string.sub(comment, 7) .. ";", "([^;]*);") do
      if strip(part) ~= "" then parts[#parts + 1] = part end
   end
   return parts
end

local function read_script(path, text)
   -- open() in text mode + str.splitlines(): every line boundary Python knows (ASCII + NEL,
   -- LINE/PARAGRAPH SEPARATOR)
   text = string.gsub(text, "\r\n", "\n")
   text = string.gsub(text, "[\r\v\f\28\29\30]", "\n")
   text = string.gsub(text, "\194\133", "\n")
   text = string.gsub(text, "\226\128[\168\169]", "\n")
   local intents, request, lineno = {}, {}, 0
   for line in string.gmatch(text .. "\n", "([^\n]*)\n") do
      lineno = lineno + 1
      do
         local s = strip(line)
         local where = {path = path, line = lineno}
         local it = nil
         if string.sub(s, 1, 6) == "#IFLUX" then
            it = parse_directive(string.sub(s, 7), where)
         elseif string.sub(s, 1, 7) == "#BB_LUA" then
            local body = string.sub(s, 8)
            for word in string.gmatch(body, "[^ \t\n\v\f\r\28-\31]+") do
               local eq = string.find(word, "=", 1, true)
               local key, value = word, ""
               if eq then key, value = string.sub(word, 1, eq - 1), string.sub(word, eq + 1) end
               if key == "pool" or key == "capacity" then request[key] = value end
            end
            if strip(body) ~= "" then it = parse_directive(body, where, true) end
         elseif string.sub(s, 1, 7) == "#SBATCH" and string.find(s, "--comment", 1, true) then
            for _, part in ipairs(comment_intents(s, where)) do
               intents[#intents + 1] = parse_directive(part, where)
            end
         elseif s ~= "" and string.sub(s, 1, 1) ~= "#" then
            break
         end
         if it then intents[#intents + 1] = it end
      end
   end
   check_job(intents, {path = path})
   return intents, request
end

local function slurm_size(text, path)
   local body = text
   local function unit(c)
      return string.match(c, "^[a-zA-Z]$") and SLURM_UNITS[string.upper(c)]
   end
   if body ~= "" and string.find("bB", string.sub(body, -1), 1, true) then
      body = string.sub(body, 1, -2)
   end
   if #body >= 2 and string.find("iI", string.sub(body, -1), 1, true)
      and unit(string.sub(body, -2, -2)) then
      body = string.sub(body, 1, -2)
   end
   local suffix = ""
   if body ~= "" and unit(string.sub(body, -1)) then
      suffix = string.upper(string.sub(body, -1))
      body = string.sub(body, 1, -2)
   end
   local size = nil
   if string.match(body, "^[0-9]+$") or string.match(body, "^[0-9]+%.[0-9]+$") then
      size = tonumber(body) * SLURM_UNITS[suffix]
   end
   if size == nil or size == math.huge then
      bad("cannot read capacity " .. repr(text) .. " (e.g. 512M, 8G)", {path = path}, "capacity")
   end
   return math.floor(size)
end

local function read_pools()
   local f = io.open(SPOOL .. "/pools.json", "r")
   if not f then return nil end
   local s = f:read("*a")
   f:close()
   local pools, order = {}, {}
   for id, quantity, granularity in string.gmatch(s,
         '"id": "([^"]*)", "quantity": ([0-9]+), "granularity": ([0-9]+)') do
      pools[id] = tonumber(quantity) * tonumber(granularity)
      order[#order + 1] = id
   end
   return pools, order
end

-- "ok" | "refuse", message | "helper" (intents without a pool request: the Python helper
-- names the pool that fits them, from the rule table)
function iflux_check(job_script)
   local f = io.open(job_script, "r")
   if not f then return "helper" end
   local text = f:read("*a")
   f:close()
   local ok, intents, request = pcall(read_script, job_script, text)
   if not ok then
      if type(intents) == "table" and intents.msg then
         return "refuse", "iflux job_process: " .. intents.msg
      end
      return "helper"
   end
   local pool, capacity = request.pool, request.capacity
   local pools, order = read_pools()
   if not pools then return "helper" end
   local checked, err = pcall(function()
      if pool ~= nil then
         if pools[pool] == nil then
            bad("unknown pool " .. repr(pool) .. "; valid: " .. table.concat(order, ", "),
                {path = job_script}, "pool")
         end
         if capacity ~= nil then
            local size, total = slurm_size(capacity, job_script), pools[pool]
            if size > total then
               bad(string.format("capacity=%s asks %.0f bytes, more than pool %s holds in total "
                                 .. "(%.0f MiB): the job could never start; ask at most "
                                 .. "capacity=%.0fM", capacity, size, pool, total / GRANULARITY,
                                 total / GRANULARITY), {path = job_script}, "capacity")
            end
         end
      end
   end)
   if not checked then
      if type(err) == "table" and err.msg then
         return "refuse", "iflux job_process: " .. err.msg
      end
      return "helper"
   end
   if #intents == 0 then return "ok" end
   if pool == nil or capacity == nil then return "helper" end
   return "ok"
end
"""


LUA = r"""-- burst_buffer.lua for Slurm's burst_buffer/lua: IFlux, intent-driven I/O accelerators.
-- Generated by schedlab.iflux.burst_buffer.install; regenerate rather than edit.
-- Lua 5.1 (Debian's Slurm 22.05): io.popen gives no exit status, so the helper's is echoed.
local SPOOL = {spool}
local FAST = {fast}
local FULL = {full}
local SWEEP = {sweep}

local function q(s)
   return "'" .. string.gsub(tostring(s), "'", "'\\''") .. "'"
end

local function call(helper, ...)
   local cmd = helper
   for i = 1, select("#", ...) do
      cmd = cmd .. " " .. q((select(i, ...)))
   end
   local p = io.popen(cmd .. " </dev/null 2>&1; echo __IFLUX_RC=$?")
   local out = p:read("*a")
   p:close()
   local rc = tonumber(string.match(out, "__IFLUX_RC=(%d+)%s*$")) or 1
   out = string.gsub(out, "__IFLUX_RC=%d+%s*$", "")
   out = string.gsub(out, "%s+$", "")
   if rc == 0 then
      return slurm.SUCCESS, out
   end
   slurm.log_error("iflux: %s", out)
   return slurm.ERROR, out
end

local function slurp(path)
   local f = io.open(path, "r")
   if not f then return nil end
   local s = f:read("*a")
   f:close()
   return s
end

-- the submit check (CHECK_LUA in burst_buffer.py), kept in the spool: precompiled by the
-- installer with luac5.1 where it could (slurmctld loads this script afresh for every call, and
-- loading bytecode is ~8x cheaper than compiling the source), else the source itself
local check = loadfile(SPOOL .. "/iflux_check.luac") or loadfile(SPOOL .. "/iflux_check.lua")
if check then check(SPOOL) end

function slurm_bb_job_process(job_script)
   -- slurmctld holds its job lock here: the check above runs in this Lua state, no process;
   -- only intents without a pool request go to the helper, which names the pool that fits
   local verdict, message = "helper", nil
   if iflux_check then verdict, message = iflux_check(job_script) end
   if verdict == "ok" then return slurm.SUCCESS end
   if verdict == "refuse" then return slurm.ERROR, message end
   local rc, out = call(FAST, "job_process", job_script)
   if rc == slurm.SUCCESS then return rc end
   return rc, out
end

function slurm_bb_pools()
   -- every AGENT_INTERVAL (30 s): finish what a killed script left (see burst_buffer.sweep);
   -- a shell test, and a detached helper only when a job left a marker
   os.execute(SWEEP)
   local pools = slurp(SPOOL .. "/pools.json")
   if not pools then
      slurm.log_error("iflux: %s/pools.json is missing (run the installer)", SPOOL)
      return slurm.ERROR, "iflux: pools.json missing"
   end
   return slurm.SUCCESS, pools
end

function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script)
   return call(FAST, "setup", job_id, uid, gid, pool, bb_size, job_script)
end

function slurm_bb_data_in(job_id, job_script)
   return call(FULL, "data_in", job_id, job_script)
end

function slurm_bb_real_size(job_id)
   return slurm.SUCCESS
end

function slurm_bb_paths(job_id, job_script, path_file)
   local env = slurp(SPOOL .. "/job-" .. job_id .. "/env")
   if env then
      local f = io.open(path_file, "w")
      if not f then
         slurm.log_error("iflux: cannot write the job environment to %s", path_file)
         return slurm.ERROR, "iflux: cannot write the job environment"
      end
      f:write(env)
      f:close()
   end
   return slurm.SUCCESS
end

function slurm_bb_pre_run(job_id, job_script)
   return call(FULL, "pre_run", job_id, job_script)
end

function slurm_bb_post_run(job_id, job_script)
   return call(FULL, "post_run", job_id, job_script)
end

function slurm_bb_data_out(job_id, job_script)
   return call(FULL, "data_out", job_id, job_script)
end

function slurm_bb_job_teardown(job_id, job_script, hurry)
   return call(FULL, "teardown", job_id, job_script, hurry)
end

function slurm_bb_get_status(...)
   local rc, out = call(FAST, "status", ...)
   return rc, out .. "\n"
end
"""


JOB_SUBMIT_LUA = r"""-- job_submit.lua for Slurm's job_submit/lua (JobSubmitPlugins=lua): IFlux.
-- Generated by schedlab.iflux.burst_buffer.install; regenerate rather than edit.
-- Slurm calls the burst-buffer plugin only for jobs with a #BB/#DW directive (or --bb), so a
-- script with only #IFLUX intents would run without IFlux, silently: refuse it at submit.
local MESSAGE = "iflux: this script declares IFlux intents (#IFLUX or --comment=\"iflux: ...\") "
   .. "but requests no burst buffer, so IFlux would never see it: add "
   .. "'#BB_LUA pool=<pool> capacity=<size>' (pools: scontrol show burstbuffer), or submit "
   .. "with 'schedlab iflux sbatch --bb'"

local function intents_without_pool(script)
   local intents, directive = false, false
   script = string.gsub(script, "\r\n?", "\n")
   for line in string.gmatch(script .. "\n", "([^\n]*)\n") do
      local s = string.gsub(line, "^%s+", "")
      if string.sub(s, 1, 6) == "#IFLUX" then
         intents = true
      elseif string.sub(s, 1, 3) == "#BB" or string.sub(s, 1, 3) == "#DW" then
         directive = true
      elseif string.sub(s, 1, 7) == "#SBATCH" and string.find(s, "--comment", 1, true)
             and string.find(string.lower(s), "iflux:", 1, true) then
         intents = true
      elseif s ~= "" and string.sub(s, 1, 1) ~= "#" then
         break  -- directives end at the first command, like #SBATCH
      end
   end
   return intents and not directive
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   if job_desc.burst_buffer ~= nil and job_desc.burst_buffer ~= "" then
      return slurm.SUCCESS
   end
   if job_desc.script ~= nil and intents_without_pool(job_desc.script) then
      slurm.log_user(MESSAGE)
      return slurm.ERROR
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end
"""


def _lua_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _helper(spool: Path, fast: bool) -> str:
    """The shell command the Lua functions run: this module, with the package found by
    PYTHONPATH; the fast calls skip site-packages (``-S``: nothing but the standard library
    and this package is imported on that path)."""
    import shlex

    import schedlab

    package_root = str(Path(schedlab.__file__).resolve().parents[1])
    entry = ("-S " + shlex.quote(str(Path(__file__).with_name("bbfast.py"))) if fast
             else "-m schedlab.iflux.burst_buffer")
    return (f"env PYTHONPATH={shlex.quote(package_root)} {shlex.quote(sys.executable)} {entry}"
            f" --spool {shlex.quote(str(spool))}")


def write_text(path: str | Path, text: str, durable: bool = True) -> Path:
    """Write-then-rename, fsynced unless ``durable=False`` (as core.io.write_text, without
    importing tempfile)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def has_gpu() -> bool:
    from schedlab.iflux.storage import has_gpu as node_has_gpu

    return node_has_gpu()


def default_pools(site: dict) -> dict[str, int]:
    """The tiers the site has roots for, at the default free capacity; gpu-direct only where
    the node has a GPU."""
    from schedlab.iflux.policies import DEFAULT_CAPACITY

    pools = {}
    for tier, size in DEFAULT_CAPACITY.items():
        name = str(tier)
        if name in POOL_TIERS and name in site.get("roots", {}):
            if name == "gpu-direct" and not has_gpu():
                continue
            pools[name] = size
    return pools


def install(conf_dir: str | Path, site: str | Path, spool: str | Path,
            pools: dict[str, int] | None = None) -> Path:
    """Write ``burst_buffer.lua`` into ``conf_dir`` (the directory of slurm.conf) and the
    compiled rule table, pool list and configuration into ``spool``; returns the Lua path.

    Every file is written to a temporary sibling and renamed, so a failed install leaves the
    previous one working.
    """
    conf_dir, spool, site = Path(conf_dir), Path(spool).resolve(), Path(site).resolve()
    try:
        raw = json.loads(site.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInputError("no such site file", path=site) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"invalid site JSON: {exc}", path=site) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("roots"), dict):
        raise BadInputError("a site is a JSON object with a 'roots' mapping", path=site,
                            field="roots")
    for tier, root in raw["roots"].items():  # slurmscriptd's cwd is not the installer's
        if not isinstance(root, str) or not root.startswith("/"):
            raise BadInputError(f"a tier root is an absolute path, got {root!r}", path=site,
                                field=f"roots.{tier}")
    if not conf_dir.is_dir():
        raise BadInputError("is not a directory (give the directory of slurm.conf)",
                            path=conf_dir)
    pools = default_pools(raw) if pools is None else dict(pools)
    for tier, size in pools.items():
        if tier not in POOL_TIERS:
            raise BadInputError(f"unknown pool tier; valid: {', '.join(POOL_TIERS)}",
                                field=f"pools.{tier}")
        if tier not in raw["roots"]:
            raise BadInputError(f"the site has no root for pool tier {tier}", path=site,
                                field=f"roots.{tier}")
        if not isinstance(size, int) or size < GRANULARITY:
            raise BadInputError(f"pool size must be an integer >= {GRANULARITY} bytes",
                                field=f"pools.{tier}")
        if tier == "gpu-direct" and not has_gpu():
            raise BadInputError("gpu-direct needs a GPU on the node and there is none",
                                field="pools.gpu-direct")
    try:
        spool.mkdir(parents=True, exist_ok=True)
        spool.chmod(0o755)
    except OSError as exc:
        raise BadInputError(f"cannot use as the spool: {exc.strerror}", path=spool) from None
    from schedlab.iflux.rules import write_table  # the full package (NumPy), at install time

    write_table(spool / "rules.json")
    write_text(spool / "pools.json", json.dumps({"pools": [
        {"id": tier, "quantity": size // GRANULARITY, "granularity": GRANULARITY}
        for tier, size in pools.items()]}))
    write_text(spool / "config.json", json.dumps(dict(site=str(site), pools=pools,
                                                      roots=raw["roots"]), indent=2))
    _byte_compile()
    _write_check(spool)
    submit_filter = conf_dir / "job_submit.lua"
    if submit_filter.is_file() and not submit_filter.read_text(errors="replace").startswith(
            JOB_SUBMIT_LUA.split("\n", 1)[0]):
        raise BadInputError("a job_submit.lua that IFlux did not write is there: merge "
                            "IFlux's filter (burst_buffer.JOB_SUBMIT_LUA) into it by hand",
                            path=submit_filter)
    write_text(submit_filter, JOB_SUBMIT_LUA)
    lua = conf_dir / "burst_buffer.lua"
    write_text(lua, LUA.replace("{spool}", _lua_str(str(spool)))
               .replace("{fast}", _lua_str(_helper(spool, True)))
               .replace("{full}", _lua_str(_helper(spool, False)))
               .replace("{sweep}", _lua_str(_sweep_command(spool))))
    return lua


def _write_check(spool: Path) -> None:
    """``iflux_check.lua`` (the submit check) into the spool, and its bytecode
    ``iflux_check.luac`` when ``luac5.1`` is installed (a stale one is removed otherwise)."""
    import shutil
    import subprocess

    source, compiled = spool / "iflux_check.lua", spool / "iflux_check.luac"
    write_text(source, CHECK_LUA)
    luac = shutil.which("luac5.1")
    tmp = spool / ".iflux_check.luac.tmp"
    if luac is not None and subprocess.run([luac, "-s", "-o", str(tmp), str(source)],
                                           capture_output=True).returncode == 0:
        os.replace(tmp, compiled)
    else:
        tmp.unlink(missing_ok=True)
        compiled.unlink(missing_ok=True)


def _sweep_command(spool: Path) -> str:
    """The shell line ``slurm_bb_pools`` runs: start :func:`sweep` in its own session
    (``setsid -f``: slurmscriptd kills the Lua call's process group when it returns) only if
    some job left a ``data_in.pid`` or ``teardown.json`` behind; otherwise no Python starts."""
    import shlex

    markers = " ".join(shlex.quote(str(spool)) + f"/job-*/{name}"
                       for name in ("data_in.pid", "teardown.json"))
    return (f"for f in {markers}; do if [ -e \"$f\" ]; then "
            f"setsid -f {_helper(spool, False)} sweep </dev/null >/dev/null 2>&1; break; fi; "
            "done")


def _byte_compile() -> None:
    """Byte-compile the fast path's modules, so each Lua call loads .pyc files even where
    PYTHONDONTWRITEBYTECODE is set for slurmctld (best effort: a read-only install is fine)."""
    import py_compile

    here = Path(__file__).resolve().parent
    for path in (here / "bbfast.py", here / "burst_buffer.py", here / "fastpath.py",
                 here.parent / "core" / "errors.py"):
        try:
            py_compile.compile(str(path), doraise=True)
        except (OSError, py_compile.PyCompileError):
            continue


def burst_buffer_conf(stage_in_timeout: int = 600, stage_out_timeout: int = 600,
                      other_timeout: int = 300) -> str:
    """A ``burst_buffer.conf`` for burst_buffer/lua (same directory as slurm.conf)."""
    return (f"StageInTimeout={stage_in_timeout}\nStageOutTimeout={stage_out_timeout}\n"
            f"OtherTimeout={other_timeout}\n")


# --------------------------------------------------------------------------- helper side


def _config(spool: Path) -> dict:
    try:
        return json.loads((spool / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInputError("IFlux burst buffer is not installed here (no config.json)",
                            path=spool) from None


def as_user(uid: int, gid: int, fn, pid_file: Path | None = None):
    """Run ``fn()`` in a forked child with the job user's uid/gid (no supplementary groups)
    and return its JSON-able result; its errors come back as one-line BadInputErrors.

    slurmscriptd runs the Lua (and so this helper) as root, but every path in an intent is the
    user's to name: creating, reading or writing them as root would let a job read any file
    (a ``source``) or create directories anywhere (a ``path``). Only what lives in root-owned
    places (the spool, the tier roots) is touched as root. Without root (tests as a user, or
    a job of root itself) ``fn`` runs in this process.
    """
    if os.geteuid() != 0 or uid == 0:
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            payload = {"ok": fn()}
        except SchedlabError as exc:
            payload, code = {"error": str(exc)}, 1
        except BaseException as exc:  # noqa: BLE001 - reported to the parent in one line
            payload, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
        try:
            with os.fdopen(write, "w") as out:
                json.dump(payload, out, default=str)
        finally:
            os._exit(code)
    os.close(write)
    if pid_file is not None:
        write_text(pid_file, f"{os.getpid()} {pid}\n")
    with os.fdopen(read) as inp:
        text = inp.read()
    os.waitpid(pid, 0)
    try:
        payload = json.loads(text)
    except ValueError:
        raise BadInputError(f"the step run as uid {uid} was killed") from None
    if "error" in payload:
        raise BadInputError(f"as uid {uid}: {payload['error']}")
    return payload["ok"]


#: files of a job's later phases, removed by setup
STALE = ("data_in.pid", "daemons.json", "stage_in.json", "stage_out.json", "report.json",
         "teardown.json")


def _job(spool: Path, job_id: str) -> Path:
    if not job_id.isdigit():
        raise BadInputError(f"a Slurm job id is a number, got {job_id!r}", field="job_id")
    return spool / f"job-{job_id}"


def _job_root(job_root: Path, uid: int, gid: int, tier: str) -> None:
    """Make ``<tier root>/slurm-<id>`` (as root) and give it to the job's user. In a tier root
    others may write to (e.g. /dev/shm itself) an entry planted there before the job is refused:
    a symlink, or a directory of another user (who could have put symlinks inside it)."""
    import stat

    try:
        job_root.mkdir(parents=True)
    except FileExistsError:
        pass
    info = os.lstat(job_root)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise BadInputError(f"{job_root} is a symlink or not a directory: refusing to use it",
                            field=f"roots.{tier}")
    if info.st_uid not in (0, uid):  # 0: made here before a crash; uid: an earlier setup
        raise BadInputError(f"{job_root} already exists and belongs to uid {info.st_uid}, "
                            f"not the job's user {uid}: refusing to use it",
                            field=f"roots.{tier}")
    os.chown(job_root, uid, gid, follow_symlinks=False)


def _read_small(path: Path, limit: int = 1000) -> str | None:
    """A short regular file's text, or None; never follows a symlink nor blocks on a FIFO
    (for files in the job's own, user-writable status directory)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)


def _phase(where: Path, phase: str) -> None:
    write_text(where / "phase", phase + "\n")


def pool_request(intents: list[dict], pools: dict[str, int], table: fastpath.Table
                 ) -> tuple[str, int] | None:
    """The pool (and bytes, rounded up to the granularity) that accelerates the most bytes
    of these intents when the job may use only that pool; None when no pool helps."""
    best: tuple[int, str] | None = None
    for tier, size in pools.items():
        try:
            placed = fastpath.allocate(intents, table, {tier: size}, fallback_pfs=True)
        except BadInputError:
            continue
        used = sum(it["size"] for it, p in zip(intents, placed, strict=True) if p["tier"] == tier)
        if used and (best is None or used > best[0]):
            best = (used, tier)
    if best is None:
        return None
    used, tier = best
    return tier, -(-used // GRANULARITY) * GRANULARITY


def with_pool_request(script: str | Path, spool: str | Path) -> str:
    """The script's text with IFlux's ``#BB_LUA pool=... capacity=...`` line added after the
    ``#!`` line (unchanged when it already asks for a pool or no pool helps)."""
    spool = Path(spool)
    config = _config(spool)
    intents, request = fastpath.read_script(str(script))
    text = Path(script).read_text(encoding="utf-8")
    if "pool" in request or not intents:
        return text
    choice = pool_request(intents, config["pools"], fastpath.load_table(spool / "rules.json"))
    if choice is None:
        return text
    line = f"#BB_LUA pool={choice[0]} capacity={choice[1] // GRANULARITY}M\n"
    lines = text.splitlines(keepends=True)
    cut = 1 if lines and lines[0].startswith("#!") else 0
    return "".join(lines[:cut]) + line + "".join(lines[cut:])


def submit(script: str | Path, sbatch_args: list[str], spool: str | Path,
           env: dict[str, str] | None = None) -> str:
    """Validate, add the pool request, and submit to a Slurm running IFlux's burst_buffer.lua
    (the script goes to sbatch on stdin, so the user's file is never modified)."""
    import subprocess

    from schedlab.core.errors import MissingServiceError

    text = with_pool_request(script, spool)
    try:
        out = subprocess.run(["sbatch", "--parsable", *sbatch_args], input=text,
                             capture_output=True, text=True, env=env)
    except FileNotFoundError:
        raise MissingServiceError("sbatch is not on PATH (install slurm-client, or run on a "
                                  "Slurm login node)") from None
    if out.returncode != 0:
        raise MissingServiceError(f"sbatch failed: {out.stderr.strip()}")
    return out.stdout.strip().split(";")[0]


def job_process(spool: Path, script: str) -> str:
    """Submission: intents valid; a pool request names a known pool and a capacity the pool can
    hold at all (a job asking more than the pool's total would pend forever); IFlux intents
    come with a pool request. A capacity smaller than the intents is accepted: what does not
    fit stays on the PFS. ``CHECK_LUA`` is the same check in Lua, run inside slurmctld."""
    config = _config(spool)
    table = fastpath.load_table(spool / "rules.json")
    intents, request = fastpath.read_script(script)
    pool, capacity = request.get("pool"), request.get("capacity")
    if pool is not None:
        if pool not in config["pools"]:
            raise BadInputError(f"unknown pool {pool!r}; valid: {', '.join(config['pools'])}",
                                path=script, field="pool")
        if capacity is not None:
            size = _slurm_size(capacity, script)
            total = config["pools"][pool] // GRANULARITY * GRANULARITY  # as pools.json
            if size > total:
                raise BadInputError(
                    f"capacity={capacity} asks {size} bytes, more than pool {pool} holds in "
                    f"total ({total // GRANULARITY} MiB): the job could never start; ask at "
                    f"most capacity={total // GRANULARITY}M", path=script, field="capacity")
    if not intents:
        return "no intents"
    if pool is None or capacity is None:
        choice = pool_request(intents, config["pools"], table)
        if choice is None:
            return "no pool helps these intents: they stay on the PFS"
        raise BadInputError(f"IFlux intents need a pool request: add '#BB_LUA pool={choice[0]} "
                            f"capacity={choice[1] // GRANULARITY}M', or submit with "
                            "'schedlab iflux sbatch --bb'", path=script, field="pool")
    return "ok"


_SLURM_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def _slurm_size(text: str, script: str) -> int:
    """Slurm's ``capacity=``: a number with an optional K/M/G/T/P suffix (binary multiples),
    optionally followed by ``i`` and ``B`` (``64MiB``). The same grammar as ``slurm_size`` in
    ``CHECK_LUA``."""
    body = text
    if body[-1:] in ("b", "B"):
        body = body[:-1]
    if len(body) >= 2 and body[-1] in "iI" and body[-2].upper() in ("K", "M", "G", "T", "P"):
        body = body[:-1]
    suffix = ""
    if body[-1:].upper() in ("K", "M", "G", "T", "P"):
        suffix, body = body[-1].upper(), body[:-1]
    size = None
    if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", body):
        size = float(body) * _SLURM_UNITS[suffix]
    if size is None or size == float("inf"):
        raise BadInputError(f"cannot read capacity {text!r} (e.g. 512M, 8G)", path=script,
                            field="capacity")
    return int(size)


def setup(spool: Path, job_id: str, uid: int, gid: int, pool: str, size: int,
          script: str) -> str:
    """Decide (table lookup), create tier directories and declared paths owned by the job's
    user, and write the plan, the job environment and ``enter.sh``. Fast path."""
    start = time.perf_counter()
    config = _config(spool)
    where = _job(spool, job_id)
    table = fastpath.load_table(spool / "rules.json")
    intents, _ = fastpath.read_script(script)
    capacity = {pool: size} if pool in config["pools"] else {}
    placed = fastpath.allocate(intents, table, capacity, fallback_pfs=True)
    decide_s = time.perf_counter() - start
    roots = config["roots"]
    mounts = []
    for i, (it, p) in enumerate(zip(intents, placed, strict=True)):
        if p["tier"] == "pfs":
            continue
        tier_dir = Path(roots[p["tier"]]) / f"slurm-{job_id}" / f"{i}-{Path(it['path']).name}"
        keep = it["usage"] != "temporary" and it["mode"] != "read-only"
        mounts.append(dict(path=it["path"], tier=p["tier"], tier_dir=str(tier_dir),
                           soft=p["soft"], source=it["source"] or it["path"],
                           flush=bool(p["soft"] & FLUSH_MASK) or keep))
    where.mkdir(parents=True, exist_ok=True)
    for stale in STALE:  # a job id Slurm reused (state reset) must not inherit these
        (where / stale).unlink(missing_ok=True)
    job_side = where / "job"  # the only spool directory the job may write
    if job_side.exists():  # an earlier job's (maybe another user's) status: start empty
        import shutil

        shutil.rmtree(job_side)  # does not follow symlinks inside
    job_side.mkdir()
    os.chown(job_side, uid, gid)
    for m in mounts:  # root-owned tier roots: the job's directory in each is made by root
        _job_root(Path(m["tier_dir"]).parent, uid, gid, m["tier"])

    def user_side() -> None:  # every path the intents name is created as the user
        for m in mounts:
            Path(m["tier_dir"]).mkdir(exist_ok=True)
            Path(m["path"]).mkdir(parents=True, exist_ok=True)
        for it, p in zip(intents, placed, strict=True):
            if p["tier"] != "pfs":
                continue
            path = Path(it["path"])  # left on the PFS: the path shows the source, as without
            if it["source"] and it["source"] != it["path"] and not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.symlink_to(it["source"], target_is_directory=True)
            else:
                path.mkdir(parents=True, exist_ok=True)

    as_user(uid, gid, user_side)
    plan = dict(job_id=f"slurm-{job_id}", site_path=config["site"], mounts=mounts,
                mapper="iflux")
    # setup's files are rebuilt by the next setup after a crash: atomic, not fsynced
    write_text(where / "plan.json", json.dumps(plan, indent=2), durable=False)
    write_text(where / "decision.json", json.dumps(dict(
        decide_s=decide_s, pool=pool, size=size, uid=uid, gid=gid,
        placements=[dict(path=it["path"], tier=p["tier"], software=fastpath.soft_list(p["soft"]),
                         chain=p["chain"], size=it["size"])
                    for it, p in zip(intents, placed, strict=True)]), indent=2), durable=False)
    mounts_env = json.dumps({m["path"]: m["tier_dir"] for m in mounts}, separators=(",", ":"))
    enter = f"BASH_ENV={where / 'enter.sh'}\n" if mounts else ""  # nothing to mount: no entry
    write_text(where / "env", f"IFLUX_JOB_ID=slurm-{job_id}\nIFLUX_MOUNTS={mounts_env}\n"
               f"IFLUX_SITE={config['site']}\nIFLUX_STATUS={job_side}\n{enter}",
               durable=False)
    write_text(where / "enter.sh", enter_script(mounts, job_side), durable=False)
    for name in ("env", "enter.sh", "plan.json", "decision.json"):
        (where / name).chmod(0o644)
    where.chmod(0o755)
    _phase(where, "set-up")
    return f"job {job_id}: " + ", ".join(f"{it['path']}->{p['tier']}"
                                          for it, p in zip(intents, placed, strict=True))


ENTER = r"""# IFlux: run this job inside a private mount namespace with its declared paths
# bind-mounted onto their accelerator tiers. bash sources this file (BASH_ENV, set by the
# burst_buffer/lua plugin) before the batch script; generated, do not edit.
# IFLUX_ENTERED names this job's status directory, not just "1": a job submitted from inside
# another job inherits the parent's environment and must still enter its own namespace.
if [ "$IFLUX_ENTERED" != {status} ] && [ -f "$0" ]; then
  export IFLUX_ENTERED={status}
  unset BASH_ENV
  __iflux_status={status}
  __iflux_mounts='{binds}exec "$@"'
  if [ "$(id -u)" = 0 ]; then
    __iflux_ns="unshare --mount --propagation private --"
    __iflux_back=""
  else
    __iflux_ns="unshare --map-root-user --mount --propagation private --"
    __iflux_back="unshare --user --map-user=$(id -u) --map-group=$(id -g) --"
  fi
  if $__iflux_ns /bin/sh -c '{probe}' iflux-probe {pairs} 2>"$__iflux_status/probe.err"; then
    echo "transparent=true ns=$__iflux_ns" > "$__iflux_status/transparent"
    exec $__iflux_ns /bin/sh -c "$__iflux_mounts" iflux-ns {pairs} $__iflux_back /bin/bash "$0" "$@"
  fi
  echo "transparent=false reason=$(head -c 300 "$__iflux_status/probe.err" | tr '\n' ' ')" \
    > "$__iflux_status/transparent"
  echo "iflux: no private mount namespace here (not root, and unprivileged user namespaces \
are off): the job runs on the PFS paths; accelerated copies are in \$IFLUX_MOUNTS" >&2
fi
"""


def enter_script(mounts: list[dict], status: Path) -> str:
    import shlex

    binds = "".join('mount --bind "$1" "$2" || exit 97; shift 2; ' for _ in mounts)
    probe = binds + "true"
    pairs = " ".join(shlex.quote(a) for m in mounts for a in (m["tier_dir"], m["path"]))
    return (ENTER.replace("{status}", shlex.quote(str(status))).replace("{binds}", binds)
            .replace("{probe}", probe).replace("{pairs}", pairs))


def _plan(where: Path):
    from schedlab.iflux.deploy import Plan

    plan_file = where / "plan.json"
    if not plan_file.is_file():
        return None
    return Plan.from_json(plan_file.read_text(encoding="utf-8"))


def data_in(spool: Path, job_id: str) -> str:
    """Stage inputs into their tiers (the job is still pending). Killed on cancel (SIGKILL to
    the process group: no handler runs): the copy only ever reads the source, and files land
    by rename, so nothing is lost; ``data_in.pid`` stays behind for the teardown, or for
    :func:`sweep` when Slurm killed that teardown too."""
    from schedlab.iflux.deploy import prepare
    from schedlab.iflux.storage import Client

    where = _job(spool, job_id)
    plan = _plan(where)
    if plan is None:
        return "no plan"
    decision = json.loads((where / "decision.json").read_text(encoding="utf-8"))
    pid_file = where / "data_in.pid"  # left behind only when this helper is killed (cancel)
    write_text(pid_file, f"{os.getpid()}\n")
    _phase(where, "staging-in")
    start = time.perf_counter()
    try:
        staged = as_user(decision["uid"], decision["gid"],  # reads only what the user may read
                         lambda: prepare(plan, Client(plan.site)).to_dict(), pid_file)
    except BaseException:
        _phase(where, "stage-in-failed")
        pid_file.unlink(missing_ok=True)  # teardown must not signal these pids once reused
        raise
    write_text(where / "stage_in.json", json.dumps({**staged,
                                                    "seconds": time.perf_counter() - start}))
    # the pid file goes last: while it exists the stage-in is running or was killed (sweep)
    if staged["failed"]:
        _phase(where, "stage-in-failed")
        pid_file.unlink(missing_ok=True)
        raise BadInputError(f"stage-in of job {job_id} failed: {len(staged['failed'])} file(s) "
                            f"not copied (first: {staged['failed'][0]})")
    _phase(where, "staged-in")
    pid_file.unlink(missing_ok=True)
    return f"staged {staged['files']} files"


def pre_run(spool: Path, job_id: str) -> str:
    """Start the write-back daemons beside the job (host namespace, where the tiers are), as
    the job's user. They are forked, not executed, so the user needs no access to the Python
    that slurmscriptd runs, and they hold none of the helper's pipes to Slurm."""
    where = _job(spool, job_id)
    plan = _plan(where)
    if plan is None:
        return "no plan"
    decision = json.loads((where / "decision.json").read_text(encoding="utf-8"))
    pids = []
    for m in plan.mounts:
        if m.flush and m.soft & fastpath.WRITE_BACK:
            pids.append(_spawn_writeback(m, decision["uid"], decision["gid"],
                                         where / "daemon.log"))
    write_text(where / "daemons.json", json.dumps(pids))
    _phase(where, "running")
    return f"{len(pids)} daemons"


def _spawn_writeback(m, uid: int, gid: int, log: Path) -> int:
    from schedlab.iflux.daemon import writeback

    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    pid = os.fork()
    if pid:
        os.close(log_fd)
        return pid
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(log_fd, 2)
        os.closerange(3, 1 << 16)
        if os.geteuid() == 0 and uid != 0:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        code = writeback(Path(m.tier_dir), Path(m.path), m.state, interval=0.2, settle=0.2,
                         compress=bool(m.soft & fastpath.COMPRESS))
    except BaseException as exc:  # noqa: BLE001 - a daemon reports to its log and exits
        os.write(2, f"iflux write-back: {type(exc).__name__}: {exc}\n".encode())
    finally:
        os._exit(code)


def _started_at(pid: int) -> float | None:
    """When a process started (epoch seconds, from /proc), or None if it is gone."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text()
                    .splitlines() if line.startswith("btime "))
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _stop_pids(pids: list[int], timeout: float = 30.0, recorded: Path | None = None) -> None:
    """SIGTERM, then SIGKILL after ``timeout``. With ``recorded`` (the file the pids were read
    from), a pid whose process started after that file was written is another process that
    reused the number (this runs as root) and is left alone."""
    if recorded is not None:
        written = recorded.stat().st_mtime + 5.0  # btime: 1 s resolution; clock jitter
        pids = [pid for pid in pids if (_started_at(pid) or 0.0) <= written]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            if _zombie(pid):
                break
            time.sleep(0.02)
        if Path(f"/proc/{pid}").exists() and not _zombie(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def post_run(spool: Path, job_id: str) -> str:
    where = _job(spool, job_id)
    daemons = where / "daemons.json"
    if daemons.is_file():
        _stop_pids(json.loads(daemons.read_text(encoding="utf-8")), recorded=daemons)
        daemons.unlink()
    return "daemons stopped"


def data_out(spool: Path, job_id: str) -> str:
    """Flush every output tier to the PFS (write-then-rename, retried). Any file that is not
    durable makes this fail with one line naming it; its tier directory is kept."""
    from schedlab.iflux.rules import Soft
    from schedlab.iflux.storage import Client
    from schedlab.iflux.transfer import TransferStats, flush_tree, load_state, save_state

    where = _job(spool, job_id)
    plan = _plan(where)
    if plan is None:
        return "no plan"
    _phase(where, "staging-out")
    decision = json.loads((where / "decision.json").read_text(encoding="utf-8"))
    start = time.perf_counter()

    def flush_all() -> dict:  # as the user: writes land only where the user may write
        client, stats = Client(plan.site), TransferStats()
        for m in plan.mounts:
            if m.flush and Path(m.tier_dir).is_dir():
                part, done = flush_tree(client, Path(m.tier_dir), Path(m.path),
                                        done=load_state(m.state),
                                        compress=bool(m.soft & Soft.COMPRESS),
                                        aggregate=bool(m.soft & Soft.AGGREGATE))
                save_state(m.state, done)
                stats.add(part)
        return stats.to_dict()

    stats = TransferStats(**as_user(decision["uid"], decision["gid"], flush_all))
    write_text(where / "stage_out.json", json.dumps({**stats.to_dict(),
                                                     "seconds": time.perf_counter() - start}))
    if stats.failed:
        first = stats.failed[0]
        _phase(where, "stage-out-failed")
        raise BadInputError(f"stage-out of job {job_id} failed: {len(stats.failed)} file(s) not "
                            f"durable on the PFS (first: {first}); data kept on the tier")
    _phase(where, "staged-out")
    return f"flushed {stats.files} files"


def _lock(where: Path, wait: bool):
    """An exclusive flock on the job's ``teardown.lock`` (held by the open file: released when
    the holder dies, even by SIGKILL), or None when ``wait`` is False and another holds it."""
    import fcntl

    fd = os.open(where / "teardown.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def teardown(spool: Path, job_id: str, hurry: bool, finished_by: str = "slurm") -> str:
    """Stop a stage-in still running (cancelled job), flush what is left, remove the tier
    directories that are fully durable and write ``report.json``.

    Resumable: Slurm 22.05 may SIGKILL this call's process group (a cancel's flush of the
    job's scripts races the teardown it queues) and then never runs it again, so the work is
    serialized by ``teardown.lock`` and ``teardown.json`` records what a killed teardown had
    decided; :func:`sweep` (or Slurm's own retry) finishes it.
    """
    where = _job(spool, job_id)
    plan = _plan(where)
    if plan is None:
        return "no plan"
    lock = _lock(where, wait=True)
    try:
        return _teardown(spool, where, job_id, plan, hurry, finished_by)
    finally:
        os.close(lock)


def _teardown(spool: Path, where: Path, job_id: str, plan, hurry: bool,
              finished_by: str) -> str:
    from schedlab.iflux.deploy import finish
    from schedlab.iflux.storage import Client
    from schedlab.iflux.transfer import TransferStats

    pid_file, started = where / "data_in.pid", where / "teardown.json"
    phase = (where / "phase").read_text().strip() if (where / "phase").is_file() else ""
    if phase == "torn-down" and (where / "report.json").is_file():
        started.unlink(missing_ok=True)
        return "torn down"  # Slurm retried: keep the report (and stage-out figures) of the first
    if started.is_file():  # a teardown that was killed: what it had decided still holds
        earlier = json.loads(started.read_text(encoding="utf-8"))
        cancelled_stage_in, hurry = earlier["cancelled_stage_in"], earlier["hurry"] or hurry
    else:
        cancelled_stage_in = pid_file.is_file() or phase in ("staging-in", "stage-in-failed")
        write_text(started, json.dumps(dict(cancelled_stage_in=cancelled_stage_in,
                                            hurry=hurry, phase=phase)))
    _phase(where, "tearing-down")
    if pid_file.is_file():
        _stop_pids([int(p) for p in pid_file.read_text().split()], recorded=pid_file)
        pid_file.unlink(missing_ok=True)
    if cancelled_stage_in:
        for m in plan.mounts:  # the job never ran: a staged tier holds only source copies
            if m.soft & fastpath.STAGE_IN:
                m.flush = False
    post_run(spool, job_id)
    if not cancelled_stage_in and phase != "staged-out":  # cancelled while running
        try:
            data_out(spool, job_id)
        except BadInputError:
            pass  # what did not flush is kept on its tier and listed below
    decision = json.loads((where / "decision.json").read_text(encoding="utf-8"))

    transparent = where / "job" / "transparent"  # written by the job: read as its user

    def finish_all() -> dict:
        stats, kept = finish(plan, Client(plan.site))
        return dict(stats=stats.to_dict(), kept=kept, transparent=_read_small(transparent))

    done = as_user(decision["uid"], decision["gid"], finish_all)
    stats, kept = TransferStats(**done["stats"]), done["kept"]
    for job_root in {Path(m.tier_dir).parent for m in plan.mounts}:
        try:
            job_root.rmdir()  # the user's job directory in a root-owned tier root
        except OSError:
            pass
    report = dict(ok=not kept, kept=kept, hurry=hurry, cancelled_stage_in=cancelled_stage_in,
                  finished_by=finished_by, flush=stats.to_dict(),
                  transparent=done["transparent"])
    for name in ("stage_in", "stage_out", "decision"):
        if (where / f"{name}.json").is_file():
            report[name] = json.loads((where / f"{name}.json").read_text(encoding="utf-8"))
    write_text(where / "report.json", json.dumps(report, indent=2))
    _phase(where, "torn-down" if not kept else "torn-down, tiers kept")
    started.unlink()
    return f"kept {kept}" if kept else "torn down"


def _alive(pid_file: Path) -> bool:
    """Whether a process recorded in ``pid_file`` still runs (a zombie does not; nor does a
    process that started after the file was written: another one that reused the pid)."""
    try:
        pids = [int(p) for p in pid_file.read_text().split()]
        written = pid_file.stat().st_mtime + 5.0
    except (OSError, ValueError):
        return False
    return any(not _zombie(pid) and (_started_at(pid) or written + 1) <= written
               for pid in pids)


def sweep(spool: Path) -> str:
    """Finish what Slurm killed and will not redo. On ``scancel`` of a job in stage-in,
    Slurm 22.05 flushes (SIGKILLs) the job's scripts and queues a hurry teardown; the two
    race in slurmscriptd, and a teardown killed by the flush is not retried
    (``_start_teardown``: "terminated by slurmctld", goto fini). A job whose ``data_in.pid``
    names only dead processes, or whose ``teardown.json`` is left with no teardown holding
    the lock, is torn down here as a cancelled stage-in would be. Run by ``slurm_bb_pools``
    (every 30 s) in its own session; a teardown Slurm does run later finds the report and
    returns at once."""
    done = []
    for where in sorted(spool.glob("job-*")):
        job_id = where.name[4:]
        if not job_id.isdigit() or not (where / "plan.json").is_file():
            continue
        pid_file, started = where / "data_in.pid", where / "teardown.json"
        killed_stage_in = pid_file.is_file() and not _alive(pid_file)
        if not (killed_stage_in or started.is_file()):
            continue
        lock = _lock(where, wait=False)
        if lock is None:
            continue  # a teardown is running (Slurm's, or another sweep)
        try:
            if (pid_file.is_file() and not _alive(pid_file)) or started.is_file():
                done.append(f"{job_id}: " + _teardown(spool, where, job_id, _plan(where),
                                                      True, "iflux-sweep"))
        except Exception as exc:  # noqa: BLE001 - one job's failure must not stop the others
            done.append(f"{job_id}: {type(exc).__name__}: {exc}")
        finally:
            os.close(lock)
    return "; ".join(done) or "nothing to finish"


def status(spool: Path, args: list[str]) -> str:
    """``scontrol show bbstat [JOBID ...]``: each job's phase and placements."""
    lines = []
    wanted = {a for a in args if a.isdigit()}
    jobs = [p for p in spool.glob("job-*") if p.name[4:].isdigit()]
    for where in sorted(jobs, key=lambda p: int(p.name[4:])):
        job_id = where.name[4:]
        if wanted and job_id not in wanted:
            continue
        phase = (where / "phase").read_text().strip() if (where / "phase").is_file() else "?"
        placed = ""
        if (where / "decision.json").is_file():
            decision = json.loads((where / "decision.json").read_text(encoding="utf-8"))
            placed = " ".join(f"{p['path']}={p['tier']}" for p in decision["placements"])
        lines.append(f"JobId={job_id} Phase={phase} {placed}".rstrip())
    return "\n".join(lines) or "IFlux: no burst-buffer jobs"


OPS = dict(job_process=1, setup=6, data_in=1, pre_run=1, post_run=1, data_out=1, teardown=1,
           status=0, sweep=0)
USAGE = f"usage: --spool DIR {{{','.join(OPS)}}} ARGS..."


def main(argv: list[str] | None = None) -> int:
    """``--spool DIR OP ARGS...``; prints one line (the message Slurm shows), exit 0 or 1.

    No argparse: this runs once per Lua call and every import counts on the fast path.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[0] != "--spool" or argv[2] not in OPS:
        print(USAGE)
        return 2
    spool, op, a = Path(argv[1]), argv[2], argv[3:]
    try:
        if len(a) < OPS[op]:
            raise BadInputError(f"{op} needs {OPS[op]} arguments, got {len(a)}")
        if op == "job_process":
            out = job_process(spool, a[0])
        elif op == "setup":
            for i, name in ((1, "uid"), (2, "gid"), (4, "bb_size")):
                if not a[i].isdigit():
                    raise BadInputError(f"must be a number, got {a[i]!r}", field=name)
            out = setup(spool, a[0], int(a[1]), int(a[2]), a[3], int(a[4]), a[5])
        elif op == "data_in":
            out = data_in(spool, a[0])
        elif op == "pre_run":
            out = pre_run(spool, a[0])
        elif op == "post_run":
            out = post_run(spool, a[0])
        elif op == "data_out":
            out = data_out(spool, a[0])
        elif op == "teardown":
            out = teardown(spool, a[0], len(a) > 2 and a[2] == "true")
        elif op == "sweep":
            out = sweep(spool)
        else:
            out = status(spool, a)
    except SchedlabError as exc:
        print(f"iflux {op}: {exc}")
        return 1
    except Exception as exc:  # noqa: BLE001 - one line for Slurm's job reason, not a traceback
        print(f"iflux {op}: {type(exc).__name__}: {exc}")
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
