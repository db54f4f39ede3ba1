import json
V=[]
def vec(name, steps, config=None, context=None):
    v={"name":name,"steps":steps}
    if config: v["config"]=config
    if context: v["context"]=context
    V.append(v)
C="coordinator"
ts=lambda: {"output":"turn_started"}
vec("a turn's lines are the node's chat lines", [
  {"op":"agent","node":C,"expect":{"interruptedTurn":None,"pendingTasks":0}},
  {"op":"say","node":C,"text":"hello there",
   "outputs":[{"node":C,"output":"turn_started","turn":1},{"node":C,"output":"model_request","turn":1,"step":1}],
   "lines":{C:[{"role":"user","text":"hello there"},{"role":"system","agent":{"entry":"turn_start","turn":1,"taskLine":2,"admitted":[]}}]},
   "state":{C:{"phase":"model_step","turn":1}}},
  {"op":"model","node":C,"text":"Hi! How can I help?",
   "outputs":[{"node":C,"output":"turn_ended","end":"completed"}],
   "lines":{C:[{"role":"assistant","text":"Hi! How can I help?","agent":{"entry":"assistant","turn":1,"step":1,"calls":[]}},{"role":"system","agent":{"entry":"turn_end","end":"completed","turn":1}}]},
   "state":{C:{"phase":"idle"}},
   "files":{"nodes/coordinator/chat.jsonl":[{},{"role":"user"},{"agent":{"entry":"turn_start"}},{"role":"assistant"},{"agent":{"entry":"turn_end"}}]}},
  {"op":"say","node":C,"text":"and again",
   "outputs":["turn_started","model_request"],
   "input":{C:{"turn":2,"step":2,"messages":[{"role":"user","text":"hello there"},{"role":"assistant","text":"Hi! How can I help?"},{"role":"turn_end"},{"role":"user","text":"and again"}]}},
   "systemContains":{C:["coordinator node `coordinator`","discussion surface"]}},
])
vec("a user line typed during a turn waits for its own turn", [
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"first","outputs":["turn_started","model_request"]},
  {"op":"say","node":C,"text":"second","outputs":[],"state":{C:{"queuedTasks":1}},
   "input":{C:{"messages":[{"role":"user","text":"first"}]}}},
  {"op":"model","node":C,"text":"one",
   "outputs":["turn_ended","turn_started","model_request"],
   "input":{C:{"turn":2,"messages":[{"role":"user","text":"first"},{"role":"assistant","text":"one"},{"role":"turn_end"},{"role":"user","text":"second"}]}}},
])
vec("a host tool call, its result and the durable gate", [
  {"op":"spawn","parent":C,"type":"task","id":"task-a","title":"Task A"},
  {"op":"agent","node":"task-a","tools":[{"name":"search","parallel":True}]},
  {"op":"say","node":"task-a","text":"find it","outputs":["turn_started","model_request"]},
  {"op":"model","node":"task-a","calls":[{"id":"c1","name":"search","arguments":{"q":"x"}}],"hold":True,
   "outputs":[]},
  {"op":"flush","outputs":[{"node":"task-a","output":"start_call","tool":"search","callId":"c1"}]},
  {"op":"settle","node":"task-a","call":"c1","value":{"hits":3},
   "outputs":[{"output":"call_finished","status":"succeeded"},"model_request"],
   "lines":{"task-a":[{"role":"tool","agent":{"entry":"tool_result","callId":"c1","status":"succeeded","value":{"hits":3}}}]}},
  {"op":"model","node":"task-a","text":"found 3","outputs":["turn_ended"]},
])
vec("cadence: work tools and mail are refused on the discussion surface", [
  {"op":"agent","node":C,"tools":[{"name":"run_job"}],"expectError":"CADENCE_VIOLATION"},
  {"op":"agent","node":C},
  {"op":"note","node":C,"job":3,"outcome":"succeeded","expectError":"CADENCE_VIOLATION","lines":{C:[]}},
  {"op":"observe","node":C,"source":"op","value":1,"expectError":"CADENCE_VIOLATION"},
])
vec("spawn via the tool creates a child with its own agent", [
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"please fix the CLA check and also tell me about lunch","outputs":["turn_started","model_request"],
   "input":{C:{"tools":[{"name":"spawn"},{"name":"wait_on"},{"name":"set_status"}]}}},
  {"op":"model","node":C,"calls":[{"id":"s1","name":"spawn","arguments":{"type":"task","title":"Fix CLA","message":"fix the CLA check"}}],
   "outputs":[{"node":C,"output":"spawned","child":"fix-cla"},{"node":C,"output":"call_finished","status":"succeeded"},{"node":C,"output":"model_request"},
              {"node":"fix-cla","output":"turn_started"},{"node":"fix-cla","output":"model_request"}],
   "lines":{C:[{"role":"assistant","text":"→ spawn"},{"role":"routing","spawn":"fix-cla","agent":{"entry":"tool_result","callId":"s1","status":"succeeded"}}],
            "fix-cla":[{},{"role":"user","text":"fix the CLA check"},{"role":"system","agent":{"entry":"turn_start","taskLine":2}}]},
   "input":{"fix-cla":{"messages":[{"role":"user","text":"fix the CLA check"}],"tools":[{"name":"spawn"},{"name":"wait_on"},{"name":"set_status"},{"name":"read_mailbox"}]}},
   "systemContains":{C:["`fix-cla` (task)"]}},
  {"op":"model","node":"fix-cla","calls":[{"id":"t1","name":"set_status","arguments":{"status":"done","summary":"CLA check fixed"}}],
   "outputs":[{"node":"fix-cla","output":"call_finished","status":"succeeded"},{"node":"fix-cla","output":"model_request"}],
   "systemContains":{C:["`fix-cla` (task) done: CLA check fixed"]}},
  {"op":"model","node":C,"text":"Spawned a task for the CLA check. Lunch: soup.","outputs":["turn_ended"]},
])
vec("enforce: a step that depends on a non-terminal mailbox waits, then resumes by itself", [
  {"op":"spawn","parent":C,"type":"task","id":"task-b","title":"Merge"},
  {"op":"graph","call":"wait","args":{"node":C,"on":"task-b","mode":"enforce"}},
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"is it merged?",
   "outputs":[{"output":"turn_started"},{"output":"waiting","on":["task-b"]}],
   "lines":{C:[{"role":"user"},{"agent":{"entry":"turn_start"}},{"role":"system","agent":{"entry":"wait","on":["task-b"]}}]},
   "state":{C:{"phase":"waiting","waiting":["task-b"]}}},
  {"op":"status","node":"task-b","status":"running","outputs":[]},
  {"op":"status","node":"task-b","status":"done","summary":"merged",
   "outputs":[{"output":"wait_over"},{"output":"model_request"}],
   "lines":{C:[{"role":"system","agent":{"entry":"wait_end","outcome":"resumed"}}]},
   "systemContains":{C:["`task-b` (task) done: merged"]}},
], config={"ACTOR_WAIT_GRAPH":"enforce"})
vec("enforce: spawn with wait holds the parent's next step until the child is done", [
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"draft the report","outputs":["turn_started","model_request"]},
  {"op":"model","node":C,"calls":[{"id":"s1","name":"spawn","arguments":{"type":"task","title":"Report draft","message":"draft it","wait":"enforce"}}],
   "outputs":[{"node":C,"output":"spawned","child":"report-draft"},{"node":C,"output":"call_finished","status":"succeeded"},{"node":C,"output":"waiting","on":["report-draft"]},
              {"node":"report-draft","output":"turn_started"},{"node":"report-draft","output":"model_request"}],
   "state":{C:{"phase":"waiting"}}},
  {"op":"model","node":"report-draft","calls":[{"id":"t1","name":"set_status","arguments":{"status":"done","summary":"drafted"}}],
   "outputs":[{"node":"report-draft","output":"call_finished","status":"succeeded"},{"node":"report-draft","output":"model_request"},{"node":C,"output":"wait_over"},{"node":C,"output":"model_request"}]},
])
vec("enforce: a waiting turn is cancellable", [
  {"op":"spawn","parent":C,"type":"task","id":"task-b","title":"Merge"},
  {"op":"graph","call":"wait","args":{"node":C,"on":"task-b","mode":"enforce"}},
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"wait for it","outputs":["turn_started","waiting"]},
  {"op":"interrupt","node":C,"reason":"user stopped","expect":{"status":"ended"},
   "outputs":[{"output":"abort_model"},{"output":"turn_ended","end":"interrupted"}],
   "lines":{C:[{"agent":{"entry":"wait_end","outcome":"cancelled"}},{"agent":{"entry":"turn_end","end":"interrupted","reason":"user stopped"}}]},
   "state":{C:{"phase":"idle","waiting":None}}},
  {"op":"status","node":"task-b","status":"done","outputs":[]},
], config={"ACTOR_WAIT_GRAPH":"enforce"})
vec("warn: the step runs and the slice carries the maybe-stale warning", [
  {"op":"spawn","parent":C,"type":"task","id":"task-b","title":"Merge"},
  {"op":"graph","call":"wait","args":{"node":C,"on":"task-b","mode":"warn"}},
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"status?","outputs":["turn_started","model_request"],
   "input":{C:{"warnings":["`task-b` is idle: its mailbox may be stale or partial"]}}},
])
vec("off: waits are ignored", [
  {"op":"spawn","parent":C,"type":"task","id":"task-b","title":"Merge"},
  {"op":"graph","call":"wait","args":{"node":C,"on":"task-b","mode":"enforce"}},
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"status?","outputs":["turn_started","model_request"],"input":{C:{"warnings":[]}}},
], config={"ACTOR_WAIT_GRAPH":"off"})
vec("restart before the model answers: the turn is interrupted and not asked again", [
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"hello","outputs":["turn_started","model_request"]},
  {"op":"crash","expect":{C:{"interruptedTurn":1,"modelStepInterrupted":True,"pendingTasks":0}},
   "outputs":[],
   "lines":{C:[{"role":"system","agent":{"entry":"turn_end","turn":1,"end":"interrupted","reason":"host restarted during a model step"}}]},
   "state":{C:{"phase":"idle"}}},
  {"op":"say","node":C,"text":"are you there?","outputs":[{"output":"turn_started","turn":2},{"output":"model_request","turn":2}],
   "input":{C:{"messages":[{"role":"user","text":"hello"},{"role":"turn_end","end":"interrupted"},{"role":"user","text":"are you there?"}]}}},
])
vec("restart mid-stream: an answer that was not durable is lost with the step, never half-kept", [
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"hello","outputs":["turn_started","model_request"]},
  {"op":"model","node":C,"text":"Hi th","hold":True,"outputs":[]},
  {"op":"crash","expect":{C:{"interruptedTurn":1,"modelStepInterrupted":True}},
   "files":{"nodes/coordinator/chat.jsonl":[{},{"role":"user"},{"agent":{"entry":"turn_start"}},{"agent":{"entry":"turn_end","end":"interrupted"}}]}},
])
vec("a model request is a read: released before its lines are durable; a crash before they are leaves no turn", [
  {"op":"agent","node":C},
  # The host's order: sync, poll (the request goes out), then flush. Here the flush never comes.
  {"op":"say","node":C,"text":"hello","hold":True,
   "outputs":[{"node":C,"output":"turn_started","turn":1},{"node":C,"output":"model_request","turn":1,"step":1}],
   "input":{C:{"turn":1,"step":1,"messages":[{"role":"user","text":"hello"}]}},
   "files":{"nodes/coordinator/chat.jsonl":[{}]}},
  # The answer's lines are effects: the turn's end waits for every line before it.
  {"op":"model","node":C,"text":"Hi","hold":True,"outputs":[],"state":{C:{"phase":"idle"}}},
  # Killed before the store wrote anything: the person's line was never durable (never
  # acknowledged to them), the turn never happened; nothing to recover, nothing re-asked.
  {"op":"crash","expect":{C:{"interruptedTurn":None,"modelStepInterrupted":False,"pendingTasks":0,"uncertainCalls":[]}},
   "outputs":[],"lines":{C:[]},
   "files":{"nodes/coordinator/chat.jsonl":[{}]},
   "state":{C:{"phase":"idle","queuedTasks":0}}},
])
vec("a model request is a read: once its lines are durable, a crash mid-stream interrupts the step", [
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"hello","hold":True,"outputs":["turn_started","model_request"]},
  # The lines become durable while the model streams: nothing more is released.
  {"op":"flush","outputs":[],
   "files":{"nodes/coordinator/chat.jsonl":[{},{"role":"user","text":"hello"},{"agent":{"entry":"turn_start","turn":1}}]}},
  {"op":"crash","expect":{C:{"interruptedTurn":1,"modelStepInterrupted":True,"pendingTasks":0}},
   "lines":{C:[{"role":"system","agent":{"entry":"turn_end","turn":1,"end":"interrupted","reason":"host restarted during a model step"}}]}},
])
vec("a read queued behind a held effect waits with it (outputs keep their order)", [
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"first","outputs":["turn_started","model_request"]},
  {"op":"say","node":C,"text":"second","outputs":[]},
  # The answer ends turn 1 and starts turn 2: its end is an effect, so turn 2's request waits too.
  {"op":"model","node":C,"text":"one","hold":True,"outputs":[]},
  {"op":"flush","outputs":["turn_ended","turn_started","model_request"]},
])
vec("restart with a call started: uncertain, evidence host_restarted", [
  {"op":"spawn","parent":C,"type":"task","id":"task-a","title":"Task A"},
  {"op":"agent","node":"task-a","tools":[{"name":"deploy"}]},
  {"op":"say","node":"task-a","text":"deploy it","outputs":["turn_started","model_request"]},
  {"op":"model","node":"task-a","calls":[{"id":"d1","name":"deploy","arguments":{}}],"outputs":[{"output":"start_call","callId":"d1"}]},
  {"op":"crash","expect":{"task-a":{"interruptedTurn":1,"modelStepInterrupted":False,"uncertainCalls":["d1"]}},
   "outputs":[],
   "lines":{"task-a":[{"role":"tool","agent":{"entry":"tool_result","callId":"d1","status":"uncertain","evidence":"host_restarted","started":True}},
                      {"agent":{"entry":"turn_end","end":"interrupted","reason":"host restarted with calls running"}}]}},
  {"op":"say","node":"task-a","text":"did it deploy?","outputs":["turn_started","model_request"],
   "input":{"task-a":{"messages":[{"role":"user"},{"role":"assistant","calls":[{"id":"d1"}]},{"role":"tool_result","callId":"d1","status":"uncertain"},{"role":"turn_end"},{"role":"user","text":"did it deploy?"}]}}},
])
vec("restart with a job running: the job is lost, its note queued, completed calls kept", [
  {"op":"spawn","parent":C,"type":"task","id":"task-a","title":"Task A"},
  {"op":"agent","node":"task-a","tools":[{"name":"render","mayStartJob":True}]},
  {"op":"say","node":"task-a","text":"render","outputs":["turn_started","model_request"]},
  {"op":"model","node":"task-a","calls":[{"id":"r1","name":"render","arguments":{}}],"outputs":["start_call"]},
  {"op":"job","node":"task-a","call":"r1","job":7,"outputs":[],
   "lines":{"task-a":[{"role":"progress","agent":{"entry":"job","job":7,"callId":"r1"}}]}},
  {"op":"settle","node":"task-a","call":"r1","value":{"job":7},"outputs":["call_finished","model_request"]},
  {"op":"model","node":"task-a","text":"rendering in the background","outputs":["turn_ended"]},
  {"op":"crash","expect":{"task-a":{"interruptedTurn":None,"lostJobs":[7],"uncertainCalls":[]}},
   "outputs":[],
   "lines":{"task-a":[{"role":"completion","agent":{"entry":"mail","kind":"job","note":{"job":7,"outcome":"lost","evidence":"host_restarted"}}}]},
   "state":{"task-a":{"pendingMail":1,"phase":"idle"}}},
  {"op":"say","node":"task-a","text":"done yet?","outputs":["turn_started","model_request"],
   "lines":{"task-a":[{"role":"user"},{"agent":{"entry":"turn_start","admitted":[1]}}]},
   "input":{"task-a":{"messages":[{"role":"user","text":"render"},{"role":"assistant"},{"role":"tool_result","callId":"r1","status":"succeeded"},{"role":"assistant","text":"rendering in the background"},{"role":"turn_end"},{"role":"mail","kind":"job","note":{"outcome":"lost"}},{"role":"user","text":"done yet?"}]}}},
  {"op":"crash","expect":{"task-a":{"lostJobs":[],"requeuedMail":0,"interruptedTurn":2}}},
])
vec("restart with a note queued: the note is admitted once, never dropped or repeated", [
  {"op":"spawn","parent":C,"type":"task","id":"task-a","title":"Task A"},
  {"op":"agent","node":"task-a"},
  {"op":"note","node":"task-a","job":4,"outcome":"succeeded","summary":"42 frames","outputs":[],
   "lines":{"task-a":[{"role":"completion","agent":{"entry":"mail","seq":1,"kind":"job","note":{"job":4,"summary":"42 frames"}}}]},
   "state":{"task-a":{"pendingMail":1,"phase":"idle"}}},
  {"op":"crash","expect":{"task-a":{"requeuedMail":1,"lostJobs":[]}},"lines":{"task-a":[]}},
  {"op":"say","node":"task-a","text":"what happened?","outputs":["turn_started","model_request"],
   "lines":{"task-a":[{"role":"user"},{"agent":{"entry":"turn_start","admitted":[1]}}]}},
  {"op":"model","node":"task-a","text":"job 4 made 42 frames","outputs":["turn_ended"]},
  {"op":"crash","expect":{"task-a":{"requeuedMail":0,"interruptedTurn":None}},"lines":{"task-a":[]}},
  {"op":"note","node":"task-a","job":5,"outcome":"failed","expect":{"seq":2}},
])
vec("a restart takes user lines no turn took; the harness's old lines are not re-asked", [
  {"op":"say","node":C,"text":"an old question"},
  {"op":"graph","call":"message","args":{"node":C,"role":"assistant","text":"an old answer"}},
  {"op":"say","node":C,"text":"a new question"},
  {"op":"agent","node":C,"expect":{"pendingTasks":1},"outputs":[{"output":"turn_started","turn":1},"model_request"],
   "input":{C:{"messages":[{"role":"user","text":"an old question"},{"role":"assistant","text":"an old answer"},{"role":"user","text":"a new question"}]}}},
])
vec("the context budget takes the most recent lines", [
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"x"*400},
  {"op":"model","node":C,"text":"y"*400},
  {"op":"say","node":C,"text":"short","input":{C:{"messages":[{"role":"turn_end"},{"role":"user","text":"short"}]}}},
], context={"contextTokens":60})
vec("disambiguation pauses the parent's model steps until it resolves", [
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"the thing","outputs":["turn_started","model_request"]},
  {"op":"model","node":C,"calls":[{"id":"d1","name":"spawn","arguments":{"type":"disambiguation","title":"boundary","message":"the thing: continue or new?"}}],
   "outputs":[{"node":C,"output":"spawned","child":"disambig-boundary"},{"node":C,"output":"call_finished"},{"node":C,"output":"waiting","on":["disambig-boundary"]},
              {"node":"disambig-boundary","output":"turn_started"},{"node":"disambig-boundary","output":"model_request"}],
   "input":{"disambig-boundary":{"tools":[{"name":"resolve"},{"name":"wait_on"},{"name":"set_status"}]}}},
  {"op":"model","node":"disambig-boundary","calls":[{"id":"r1","name":"resolve","arguments":{"candidates":["continue"],"note":"it continues"}}],
   "outputs":[{"node":"disambig-boundary","output":"call_finished","status":"succeeded"},{"node":"disambig-boundary","output":"model_request"},{"node":C,"output":"wait_over"},{"node":C,"output":"model_request"}],
   "lines":{"disambig-boundary":[{"role":"assistant","text":"→ resolve"},{"role":"routing","agent":{"entry":"tool_result","tool":"resolve","value":{"into":["coordinator"]}}}]}},
])
vec("a failed graph tool is a result the model sees, on the discussion surface as a routing line", [
  {"op":"agent","node":C},
  {"op":"say","node":C,"text":"go","outputs":["turn_started","model_request"]},
  {"op":"model","node":C,"calls":[{"id":"w1","name":"wait_on","arguments":{"node":"nope","mode":"enforce"}}],
   "outputs":[{"output":"call_finished","status":"failed"},"model_request"],
   "lines":{C:[{"role":"assistant"},{"role":"routing","agent":{"entry":"tool_result","status":"failed","code":"UNKNOWN_NODE"}}]}},
])
ev=lambda seq,t,**k: dict({"job":7,"seq":seq,"type":t},**k)
vec("a job's journal is kept with its node: milestones, and the latest repeating event with a count", [
  {"op":"spawn","parent":C,"type":"task","id":"task-a","title":"Task A"},
  {"op":"agent","node":"task-a","tools":[{"name":"render","mayStartJob":True}]},
  {"op":"say","node":"task-a","text":"render","outputs":["turn_started","model_request"]},
  {"op":"model","node":"task-a","calls":[{"id":"r1","name":"render","arguments":{}}],"outputs":["start_call"]},
  {"op":"job","node":"task-a","call":"r1","job":7},
  {"op":"jobEvent","node":"task-a","event":ev(1,"submitted"),"expect":{"recorded":True}},
  {"op":"jobEvent","node":"task-a","event":ev(2,"started")},
  {"op":"jobEvent","node":"task-a","event":ev(3,"progress",value=0.1)},
  {"op":"jobEvent","node":"task-a","event":ev(4,"progress",value=0.2)},
  {"op":"jobEvent","node":"task-a","event":ev(5,"progress",value=0.3),
   "files":{"nodes/task-a/jobs.jsonl":[{"seq":1,"type":"submitted"},{"seq":2,"type":"started"}]}},
  {"op":"jobEvent","node":"task-a","event":dict(job=99,seq=1,type="submitted"),"expect":{"recorded":False}},
  {"op":"jobEvent","node":"task-a","event":ev(6,"outcome",outcome="succeeded"),
   "files":{"nodes/task-a/jobs.jsonl":[{"seq":1},{"seq":2},{"type":"elided","count":2,"before":5},{"seq":5,"type":"progress","value":0.3},{"seq":6,"type":"outcome"}]}},
  {"op":"note","node":"task-a","job":7,"outcome":"succeeded","summary":"done"},
  {"op":"crash","expect":{"task-a":{"lostJobs":[]}}},
])
json.dump({"suite":"agents","description":"Agents on actor nodes: lines, slices, waits, spawn, cadence and restart outcomes (core/src/agents).","vectors":V}, open("tests/vectors/agents.json","w"), indent=1)
print(len(V))
