-- Argo CD health check for streamjob.io/StreamJob (docs/gitops.md).
-- Healthy: the job runs the current generation's spec and is ready.
-- Progressing: deploy, upgrade, savepoint, restart wait, or the operator has not seen this generation yet.
-- Degraded: failed, restarts exhausted, rolling back or rolled back, a blocked change, an API/S3 error.
-- Suspended: suspended as the spec asks.
local hs = {}

local function condition(t)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == t then
      return c
    end
  end
  return nil
end

local function isTrue(c)
  return c ~= nil and c.status == "True"
end

local function say(c, default)
  if c == nil then
    return default
  end
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

if obj.status == nil or obj.status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the StreamJob operator"
  return hs
end

local st = obj.status
local generation = obj.metadata.generation
if generation ~= nil and st.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end

local stalled = condition("Stalled")
local reconciling = condition("Reconciling")
local degraded = condition("Degraded")
local ready = condition("Ready")

if st.state == "Suspended" and st.operation == nil then
  hs.status = "Suspended"
  hs.message = "The job is suspended"
  if st.lastSavepoint ~= nil and st.lastSavepoint.path ~= nil then
    hs.message = hs.message .. "; it resumes from " .. st.lastSavepoint.path
  end
  return hs
end

-- an operator older than the Stalled condition: a blocked change counts as long as it is recorded
local blocked = stalled == nil and st.blockedChange ~= nil

if st.state == "Failed" or st.state == "Finished" or st.state == "RollingBack" or isTrue(stalled) or blocked then
  hs.status = "Degraded"
  if isTrue(stalled) then
    hs.message = say(stalled, "")
  elseif blocked then
    hs.message = st.blockedChange.reason .. ": " .. (st.blockedChange.message or "")
  else
    hs.message = say(degraded, "The job is " .. st.state)
  end
  return hs
end

if isTrue(reconciling) or st.operation ~= nil then
  hs.status = "Progressing"
  hs.message = say(reconciling, "The job is " .. tostring(st.state))
  return hs
end

if isTrue(degraded) then
  hs.status = "Degraded"
  hs.message = say(degraded, "")
  return hs
end

if st.state == "Running" and st.ready == true and isTrue(ready)
    and (generation == nil or ready.observedGeneration == nil or ready.observedGeneration == generation) then
  hs.status = "Healthy"
  hs.message = say(ready, "The job is running")
  return hs
end

hs.status = "Progressing"
hs.message = say(ready, "The job is " .. tostring(st.state))
return hs
