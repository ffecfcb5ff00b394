/*
 * stormpy's control API and the structs it stores in ZooKeeper and on local disk.
 *
 * Names follow Apache Storm's storm.thrift wherever the concept exists there, so
 * that Storm users (and Storm's own Thrift clients) recognise them. Differences:
 *  - ComponentObject gains `python_object` ("module:Class"), the way stormpy refers
 *    to user code; Nimbus never imports it.
 *  - Grouping gains `partial_key` (Storm ships PartialKeyGrouping as a serialized
 *    Java object, which a Python cluster cannot use).
 *  - Executors are keyed by the ExecutorInfo struct instead of list<i64>, because
 *    Python cannot use a list as a dict key.
 * Loaded at run time with thriftpy2 (stormpy/thrift.py); never compiled.
 */

namespace py stormpy

// ---------------------------------------------------------------- topology

struct NullStruct {
}

struct PythonObject {
  1: required string class_name;     // "package.module:Class"
  2: optional binary serialized;     // pickled instance (custom groupings)
}

struct ShellComponent {
  1: string execution_command;
  2: string script;
}

union ComponentObject {
  1: binary serialized_java;
  2: ShellComponent shell;
  3: PythonObject python_object;
  4: JavaObject java_object;          // Storm's id is 3 (stormpy's python_object): only for the DSL's
                                      // thrift_topology of JavaBolt/JavaSpout specs, which Nimbus refuses
}

union Grouping {
  1: list<string> fields;            // an empty list means global grouping
  2: NullStruct shuffle;
  3: NullStruct all;
  4: NullStruct none;
  5: NullStruct direct;
  6: PythonObject custom_object;
  7: binary custom_serialized;
  8: NullStruct local_or_shuffle;
  9: list<string> partial_key;
}

struct StreamInfo {
  1: required list<string> output_fields;
  2: required bool direct;
}

struct GlobalStreamId {
  1: required string componentId;
  2: required string streamId;
}

struct ComponentCommon {
  1: required map<GlobalStreamId, Grouping> inputs;
  2: required map<string, StreamInfo> streams;   // key is stream id
  3: optional i32 parallelism_hint;              // how many executors
  4: optional string json_conf;                  // component-specific configuration
}

struct SpoutSpec {
  1: required ComponentObject spout_object;
  2: required ComponentCommon common;
}

struct Bolt {
  1: required ComponentObject bolt_object;
  2: required ComponentCommon common;
}

struct StateSpoutSpec {
  1: required ComponentObject state_spout_object;
  2: required ComponentCommon common;
}

struct StormTopology {
  1: required map<string, SpoutSpec> spouts;
  2: required map<string, Bolt> bolts;
  3: required map<string, StateSpoutSpec> state_spouts;
}

// ---------------------------------------------------------------- exceptions

exception AlreadyAliveException {
  1: required string msg;
}

exception NotAliveException {
  1: required string msg;
}

exception InvalidTopologyException {
  1: required string msg;
}

exception IllegalStateException {
  1: required string msg;
}

// a call the caller's principal may not make (nimbus.admins, nimbus.users, topology.users)
exception AuthorizationException {
  1: required string msg;
}

// ---------------------------------------------------------------- options

enum TopologyInitialStatus {
  ACTIVE = 1,
  INACTIVE = 2
}

struct SubmitOptions {
  1: required TopologyInitialStatus initial_status;
}

struct KillOptions {
  1: optional i32 wait_secs;
}

struct RebalanceOptions {
  1: optional i32 wait_secs;
  2: optional i32 num_workers;
  3: optional map<string, i32> num_executors;
}

// ---------------------------------------------------------------- stats and summaries

struct ExecutorInfo {
  1: required i32 task_start;
  2: required i32 task_end;
}

// Windows are "600", "10800", "86400" and ":all-time", as in Storm.
struct BoltStats {
  1: required map<string, map<GlobalStreamId, i64>> acked;
  2: required map<string, map<GlobalStreamId, i64>> failed;
  3: required map<string, map<GlobalStreamId, double>> process_ms_avg;
  4: optional map<string, map<GlobalStreamId, i64>> executed;
  5: optional map<string, map<GlobalStreamId, double>> execute_ms_avg;
}

struct SpoutStats {
  1: required map<string, map<string, i64>> acked;
  2: required map<string, map<string, i64>> failed;
  3: required map<string, map<string, double>> complete_ms_avg;
}

union ExecutorSpecificStats {
  1: BoltStats bolt;
  2: SpoutStats spout;
}

struct ExecutorStats {
  1: required map<string, map<string, i64>> emitted;
  2: required map<string, map<string, i64>> transferred;
  3: required ExecutorSpecificStats specific;
  4: optional double rate;
  // stormpy: free-form per-executor counters (e.g. a sink's batches, rows, seconds)
  5: optional map<string, double> metrics;
}

struct ExecutorSummary {
  1: required ExecutorInfo executor_info;
  2: required string component_id;
  3: required string host;
  4: required i32 port;
  5: required i32 uptime_secs;
  7: optional ExecutorStats stats;
}

struct ErrorInfo {
  1: required string error;
  2: required i32 error_time_secs;
  3: optional string host;
  4: optional i32 port;
}

struct TopologySummary {
  1: required string id;
  2: required string name;
  3: required i32 num_tasks;
  4: required i32 num_executors;
  5: required i32 num_workers;
  6: required i32 uptime_secs;
  7: required string status;
  513: optional string sched_status;      // Storm's field id: why the topology is not fully served (its code missing, a failed requirements install)
  514: optional string owner;             // Storm's field id: the submitting user (`sparse list` shows it)
}

struct SupervisorSummary {
  1: required string host;
  2: required i32 uptime_secs;
  3: required i32 num_workers;
  4: required i32 num_used_workers;
  5: optional string supervisor_id;
  6: optional string version;
  20: optional i32 logviewer_port;         // stormpy: where `stormpy logs` reads this supervisor's worker logs
}

struct NimbusSummary {
  1: required string host;
  2: required i32 port;
  3: required i32 uptime_secs;
  4: required bool isLeader;
  5: required string version;
}

struct ClusterSummary {
  1: required list<SupervisorSummary> supervisors;
  2: optional i32 nimbus_uptime_secs;
  3: required list<TopologySummary> topologies;
  4: optional list<NimbusSummary> nimbuses;
}

struct TopologyInfo {
  1: required string id;
  2: required string name;
  3: required i32 uptime_secs;
  4: required list<ExecutorSummary> executors;
  5: required string status;
  6: required map<string, list<ErrorInfo>> errors;   // component id -> newest errors
  513: optional string sched_status;      // as in TopologySummary
}

// ---------------------------------------------------------------- ZooKeeper state

enum TopologyStatus {
  ACTIVE = 1,
  INACTIVE = 2,
  REBALANCING = 3,
  KILLED = 4
}

union TopologyActionOptions {
  1: KillOptions kill_options;
  2: RebalanceOptions rebalance_options;
}

// /storms/<topology-id>
struct StormBase {
  1: required string name;
  2: required TopologyStatus status;
  3: required i32 num_workers;
  4: optional map<string, i32> component_executors;
  5: optional i32 launch_time_secs;
  6: optional string owner;
  7: optional TopologyActionOptions topology_action_options;
  8: optional TopologyStatus prev_status;
}

struct NodeInfo {
  1: required string node;
  2: required set<i64> port;
}

// /assignments/<topology-id>
struct Assignment {
  1: required string master_code_dir;
  2: optional map<string, string> node_host = {};
  3: optional map<ExecutorInfo, NodeInfo> executor_node_port = {};
  4: optional map<ExecutorInfo, i64> executor_start_time_secs = {};
}

// /supervisors/<supervisor-id>
struct SupervisorInfo {
  1: required i64 time_secs;
  2: required string hostname;
  3: optional string assignment_id;
  4: optional list<i64> used_ports;
  5: optional list<i64> meta;              // all ports of the supervisor
  6: optional map<string, string> scheduler_meta;
  7: optional i64 uptime_secs;
  8: optional string version;
  20: optional i32 logviewer_port;         // stormpy: the supervisor's log viewer (logviewer.port), 0 = none
}

// /workerbeats/<topology-id>/<node>-<port>
struct ClusterWorkerHeartbeat {
  1: required string storm_id;
  2: required map<ExecutorInfo, ExecutorStats> executor_stats;
  3: required i32 time_secs;
  4: required i32 uptime_secs;
}

// /errors/<topology-id>/<component-id>/e<seq>: ErrorInfo

// ---------------------------------------------------------------- supervisor local state

struct LSSupervisorId {
  1: required string supervisor_id;
}

struct LocalAssignment {
  1: required string topology_id;
  2: required list<ExecutorInfo> executors;
}

struct LSSupervisorAssignments {
  1: required map<i32, LocalAssignment> assignments;   // port -> assignment
}

struct LSWorkerHeartbeat {
  1: required i32 time_secs;
  2: required string topology_id;
  3: required list<ExecutorInfo> executors;
  4: required i32 port;
  5: optional i32 pid;
}

struct LSApprovedWorkers {
  1: required map<string, i32> approved_workers;       // worker id -> port
}

// ---------------------------------------------------------------- service

// Storm's page structs as streamparse's and Storm's clients read them; the aggregate-stats
// fields of Storm (9, 10, 12 and 7-10 of ComponentPageInfo) are not filled by stormpy and
// left out here (optional in Storm, so both sides still read each other).
// Storm's JVM object description: only named here (streamparse's JavaBolt/JavaSpout build it);
// stormpy refuses JVM components, so no struct above refers to it.
union JavaObjectArg {
  1: i32 int_arg;
  2: i64 long_arg;
  3: string string_arg;
  4: bool bool_arg;
  5: binary binary_arg;
  6: double double_arg;
}

struct JavaObject {
  1: required string full_class_name;
  2: required list<JavaObjectArg> args_list;
}

enum ComponentType {
  BOLT = 1,
  SPOUT = 2
}

struct TopologyPageInfo {
  1: required string id;
  2: optional string name;
  3: optional i32 uptime_secs;
  4: optional string status;
  5: optional i32 num_tasks;
  6: optional i32 num_workers;
  7: optional i32 num_executors;
  8: optional string topology_conf;
  11: optional string sched_status;
  13: optional string owner;
}

struct ComponentPageInfo {
  1: required string component_id;
  2: required ComponentType component_type;
  3: optional string topology_id;
  4: optional string topology_name;
  5: optional i32 num_executors;
  6: optional i32 num_tasks;
  11: optional list<ErrorInfo> errors;
  15: optional string topology_status;
}

service Nimbus {
  void submitTopology(1: string name, 2: string uploadedJarLocation, 3: string jsonConf, 4: StormTopology topology)
    throws (1: AlreadyAliveException e, 2: InvalidTopologyException ite, 3: AuthorizationException aze);
  void submitTopologyWithOpts(1: string name, 2: string uploadedJarLocation, 3: string jsonConf, 4: StormTopology topology, 5: SubmitOptions options)
    throws (1: AlreadyAliveException e, 2: InvalidTopologyException ite, 3: AuthorizationException aze);
  void killTopology(1: string name) throws (1: NotAliveException e, 2: AuthorizationException aze);
  void killTopologyWithOpts(1: string name, 2: KillOptions options) throws (1: NotAliveException e, 2: AuthorizationException aze);
  void activate(1: string name) throws (1: NotAliveException e, 2: AuthorizationException aze);
  void deactivate(1: string name) throws (1: NotAliveException e, 2: AuthorizationException aze);
  void rebalance(1: string name, 2: RebalanceOptions options)
    throws (1: NotAliveException e, 2: InvalidTopologyException ite, 3: AuthorizationException aze);

  // uploads: the server chooses the location; clients never name a path
  string beginFileUpload() throws (1: IllegalStateException ise, 2: AuthorizationException aze);
  void uploadChunk(1: string location, 2: binary chunk) throws (1: IllegalStateException ise, 2: AuthorizationException aze);
  void finishFileUpload(1: string location) throws (1: IllegalStateException ise, 2: AuthorizationException aze);

  // downloads: `file` is a path Nimbus handed out (an Assignment's master_code_dir + "/stormcode.zip" etc.)
  string beginFileDownload(1: string file) throws (1: IllegalStateException ise, 2: AuthorizationException aze);
  binary downloadChunk(1: string id) throws (1: IllegalStateException ise, 2: AuthorizationException aze);

  string getNimbusConf() throws (1: AuthorizationException aze);
  ClusterSummary getClusterInfo() throws (1: AuthorizationException aze);
  TopologyInfo getTopologyInfo(1: string id) throws (1: NotAliveException e, 2: AuthorizationException aze);
  string getTopologyConf(1: string id) throws (1: NotAliveException e, 2: AuthorizationException aze);
  StormTopology getTopology(1: string id) throws (1: NotAliveException e, 2: AuthorizationException aze);
  StormTopology getUserTopology(1: string id) throws (1: NotAliveException e, 2: AuthorizationException aze);

  // Storm 1.1+ calls that streamparse's `sparse` makes
  bool isTopologyNameAllowed(1: string name) throws (1: AuthorizationException aze);
  NimbusSummary getLeader() throws (1: AuthorizationException aze);
  TopologyPageInfo getTopologyPageInfo(1: string id, 2: string window, 3: bool is_include_sys)
    throws (1: NotAliveException e, 2: AuthorizationException aze);
  ComponentPageInfo getComponentPageInfo(1: string topology_id, 2: string component_id, 3: string window,
                                         4: bool is_include_sys) throws (1: NotAliveException e, 2: AuthorizationException aze);
}
