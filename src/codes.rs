//! The one vocabulary of agent-facing error codes: every code an answer can carry (a
//! decision's `errors[].code`, an error body's `error`, `/v1/execute`'s `error.code`), one
//! snake_case spelling each, with the HTTP status it is answered with, where it appears, what
//! it means and the default hint. `docs/http-api.md` holds the same table (a test checks it).

use serde::{Serialize, Serializer};

macro_rules! codes {
    ($($variant:ident = $name:literal, $status:literal, $place:literal, $meaning:literal, $hint:literal;)*) => {
        /// An agent-facing error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $(#[doc = $meaning] $variant,)*
        }

        impl Code {
            /// Every code, in the order of the documented table.
            pub const ALL: &'static [Code] = &[$(Code::$variant),*];

            /// The spelling callers see.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $name,)* }
            }

            /// The HTTP status of an answer this code heads: an error body's status, or 200
            /// for a code that only ever appears inside a decision (any code may also appear
            /// in a decision's `errors`, which is answered 200) or inside a run's result.
            pub fn status(self) -> u16 {
                match self { $(Code::$variant => $status,)* }
            }

            /// Where the code appears.
            pub fn place(self) -> &'static str {
                match self { $(Code::$variant => $place,)* }
            }

            /// What it means.
            pub fn meaning(self) -> &'static str {
                match self { $(Code::$variant => $meaning,)* }
            }

            /// What to do about it, when the answer gives no more specific suggestion.
            pub fn hint(self) -> &'static str {
                match self { $(Code::$variant => $hint,)* }
            }
        }
    };
}

codes! {
    Unauthenticated = "unauthenticated", 401, "decision (`auth`)",
        "no credential, an unknown token or a JWT that does not verify",
        "send the agent's token as `Authorization: Bearer <token>`";
    NotAnAgent = "not_an_agent", 200, "decision (`auth`)",
        "a human's credential called a tool",
        "call tools with an agent's credential; humans approve and operate";
    WrongPrincipalKind = "wrong_principal_kind", 403, "error body; operator actions",
        "the route or action is for another kind of principal (an agent reporting results, a human approving or operating)",
        "use the credential of the kind of principal the message names";
    Forbidden = "forbidden", 200, "decision (`policy`)",
        "a policy forbids the call (`reasons` names it)",
        "do not retry unchanged: a policy forbids this call (`reasons` names it)";
    NotPermitted = "not_permitted", 200, "decision (`policy`)",
        "no policy permits the call",
        "no policy permits this call: ask an operator for access, or for a grant";
    PolicyError = "policy_error", 200, "decision (`policy`)",
        "a policy failed to evaluate: denied (fail closed)",
        "retry later; operators: a policy failed to evaluate (see the logs and `toolgate validate`)";
    InternalError = "internal_error", 200, "decision (`policy`)",
        "the Cedar request could not be built: denied (fail closed)",
        "retry later; operators: see the logs";
    InvalidPrincipal = "invalid_principal", 200, "decision (`policy`)",
        "the credential's principal could not be evaluated",
        "operators: add the credential's principal to entities.json";
    KillSwitch = "kill_switch", 200, "decision (`kill_switch`)",
        "the kill switch is on",
        "do not retry; wait until an operator turns the kill switch off";
    SharedStateUnavailable = "shared_state_unavailable", 200, "decision (`shared_state`)",
        "the fleet's shared state (Redis) could not be read: denied (fail closed)",
        "retry later; operators: check that Redis (`[fleet] redis_url`) is up and reachable (see /readyz `shared_state`)";
    Quarantined = "quarantined", 200, "decision (`quarantine`)",
        "the agent is quarantined",
        "do not retry; an operator reviews the audit log and releases it (POST /v1/admin/quarantine)";
    RateLimited = "rate_limited", 429, "decision (`rate_limit`); error body",
        "a rate limit refused the call; `retry_after` says when to retry",
        "wait `retry_after` seconds before calling again; do not retry in a loop";
    NoPolicySet = "no_policy_set", 200, "decision (`registry`)",
        "no policy set is loaded (the files did not load at start and none was remembered): every call is denied",
        "not a problem with this call; operators: `toolgate validate` lists every problem, GET /readyz names the first";
    UnknownTool = "unknown_tool", 400, "decision (`registry`); `/v1/results`",
        "no tool of that name is registered",
        "call a tool that GET /v1/tools lists";
    PathOutsideRoot = "path_outside_root", 200, "decision (`validation`)",
        "a path argument is absolute, leaves the service root or starts with `-`",
        "name a relative path below the service root";
    InvalidArgument = "invalid_argument", 422, "decision (`validation`); `/v1/execute` `error`",
        "an argument fails the tool's JSON Schema (one error per problem, by path); in `/v1/execute`: an argument holds a NUL byte",
        "fix the arguments to match the tool's `inputSchema` (GET /v1/tools)";
    SecretInArguments = "secret_in_arguments", 200, "decision (`gate`)",
        "the tool_call gate blocks what the arguments contain",
        "do not send secrets as arguments; refer to them by name";
    GatesUnavailable = "gates_unavailable", 503, "decision (`gate`); error body",
        "the redaction detectors are not available, so nothing can be screened (fail closed)",
        "operators: see the logs at startup for why the detectors failed to build";
    ApprovalRequired = "approval_required", 200, "decision (`approval`)",
        "the call needs a human's approval (`approval_id`)",
        "wait for the approval (GET /v1/approvals/{id}?wait=30s), then send the same call with `approval_id`";
    ApprovalNotFound = "approval_not_found", 404, "decision (`approval`); error body",
        "no approval with this id (visible to this caller)",
        "use the `approval_id` from a pending_approval decision";
    ApprovalExpired = "approval_expired", 409, "decision (`approval`); approve, deny",
        "the approval expired",
        "send the call again for a new approval";
    ApprovalNotApproved = "approval_not_approved", 200, "decision (`approval`)",
        "the approval is still pending, or was denied",
        "wait until a human approves it (GET /v1/approvals/{id}?wait=30s)";
    ApprovalReplayed = "approval_replayed", 200, "decision (`approval`)",
        "the approval was already used: approvals are single use",
        "approvals are single use: send the call again for a new approval";
    ApprovalMismatch = "approval_mismatch", 200, "decision (`approval`)",
        "the approval is for another agent, tool or set of arguments",
        "send the exact call that was approved, from the agent that asked";
    ApprovalAlreadyDecided = "approval_already_decided", 409, "approve, deny",
        "a human already decided the approval",
        "ask the agent to send the call again for a new approval";
    TooManyPendingApprovals = "too_many_pending_approvals", 429, "decision (`approval_limit`)",
        "the bound on pending approvals is reached; none was opened",
        "wait for pending approvals to be decided or expire, then call again";
    AuditUnavailable = "audit_unavailable", 503, "decision (`audit`)",
        "the decision could not be recorded, so it is a deny",
        "retry later; operators: see /readyz and the logs";
    ExplainFailed = "explain_failed", 200, "`/v1/explain` `errors`",
        "the call could not be put to Cedar for an explanation",
        "check the call's tool and arguments; operators: see the logs";
    InvalidJson = "invalid_json", 400, "error body",
        "the body is not well-formed JSON",
        "send a well-formed JSON object";
    InvalidBody = "invalid_body", 400, "error body",
        "the body has unknown fields, duplicate keys in `args`, or wrong types",
        "send only the fields the message lists (docs/openapi.json has each route's body)";
    IdentityInBody = "identity_in_body", 400, "error body",
        "the body names a principal; identity comes only from the credential",
        "remove the field; authenticate as the principal instead";
    InvalidQuery = "invalid_query", 400, "error body",
        "a query parameter is not understood (`status`, `wait`, …)",
        "see docs/openapi.json for this route's query parameters";
    InvalidContext = "invalid_context", 400, "error body",
        "`context` (`conv_id`, `trace_id`, `iter`) is malformed",
        "send `context` as {conv_id, trace_id, iter} with short printable ids";
    InvalidTool = "invalid_tool", 400, "error body",
        "the tool name is malformed",
        "name the tool as GET /v1/tools lists it";
    InvalidApprovalId = "invalid_approval_id", 400, "error body",
        "`approval_id` is malformed",
        "use the `approval_id` from a pending_approval decision";
    InvalidAgent = "invalid_agent", 400, "error body",
        "`/v1/explain` or `/v1/admin/quarantine`: the agent id is malformed",
        "name an agent id (`dev-agent`) or uid (`Agent::\"dev-agent\"`)";
    InvalidRoles = "invalid_roles", 400, "error body",
        "`/v1/explain`: `roles` is malformed",
        "send roles as short printable names";
    InvalidAnomaly = "invalid_anomaly", 400, "error body",
        "`/v1/explain`: `anomaly` names an unknown kind",
        "use spike, repeated_failures, sequence or violation_rate";
    InvalidDecisionId = "invalid_decision_id", 400, "error body",
        "`/v1/results`: `decision_id` is empty, too long or not printable",
        "send the `decision_id` of the decision that allowed the call";
    UnknownDecision = "unknown_decision", 404, "error body",
        "`/v1/results`: no allowed decision of this agent has that `decision_id` (never made, another principal's, another sidecar's, beyond the 65,536 most recent, or made in the last seconds before an unclean stop); the output was not screened and must not reach the model",
        "send the `decision_id` this sidecar answered for this call; to screen output without a decision, send `conv_id` and no `decision_id`";
    DecisionMismatch = "decision_mismatch", 409, "error body",
        "`/v1/results`: the decision allowed another tool than the one named",
        "report the output under the tool the decision allowed";
    ResultReported = "result_reported", 409, "error body",
        "`/v1/results`: this decision's result was reported already (or toolgate ran the call and recorded its output itself)",
        "report each call's output once, under its own decision";
    InvalidStreamId = "invalid_stream_id", 400, "error body",
        "`/v1/gates/stream`: `stream_id` is malformed",
        "use 1 to 128 printable ASCII characters, the same for every chunk of one stream";
    InvalidChunk = "invalid_chunk", 400, "error body",
        "`/v1/gates/stream`: `content` is not a string",
        "send each chunk's `content` as a string";
    InvalidEntity = "invalid_entity", 400, "error body",
        "a grant names a principal that is not an `Agent` or a known `Role`, a resource that is not a registered `Tool`, or an id over 256 bytes or with control characters",
        "name entities as {\"type\": \"Agent\", \"id\": \"dev-agent\"}";
    InvalidTtl = "invalid_ttl", 400, "error body",
        "a grant's `ttl_s` is outside 1 s…30 days",
        "set `ttl_s` from 1 to 2592000 (30 days)";
    InvalidReason = "invalid_reason", 400, "error body",
        "a grant's `reason` is over 1,024 bytes or has control characters",
        "keep `reason` under 1024 bytes, without control characters";
    UnsupportedMediaType = "unsupported_media_type", 415, "error body",
        "the body is not `application/json`",
        "send `Content-Type: application/json`";
    BodyTooLarge = "body_too_large", 413, "error body",
        "the body is over `max_body_bytes` (16 MiB for `/v1/results`)",
        "send smaller arguments; the limit is `max_body_bytes` in the config";
    BodyTimeout = "body_timeout", 408, "error body",
        "the body did not arrive within `[server] body_timeout_ms`",
        "send the whole body at once; the limit is `server.body_timeout_ms` in the config";
    TooManyConnections = "too_many_connections", 503, "error body",
        "every connection slot holds a request in progress",
        "retry shortly; operators: the limit is `server.max_connections` in the config";
    TooManyHeld = "too_many_held", 429, "error body; `/mcp`",
        "the caller holds its most long polls (`[server] max_waits_per_principal`) or event streams (`[server] max_streams_per_principal`) open at once; the message names the bound",
        "end a request you hold open before opening another; operators: the message names the config key";
    TooManySessions = "too_many_sessions", 429, "`/mcp`",
        "the caller has `[mcp] max_sessions_per_principal` MCP sessions open",
        "reuse a session, or end one (`DELETE /mcp`); idle sessions end after `[mcp] session_idle_secs`";
    NotFound = "not_found", 404, "error body",
        "no such route",
        "see docs/openapi.json for the routes";
    MethodNotAllowed = "method_not_allowed", 405, "error body",
        "the route does not take this method",
        "see docs/openapi.json for the routes";
    CsrfRejected = "csrf_rejected", 403, "error body (console session)",
        "a state change sent with the console's session cookie lacked its CSRF token, or came from another origin",
        "send the session's token (GET /ui/session `csrf`) as `X-Toolgate-CSRF`, from the console's own origin";
    HostRejected = "host_rejected", 403, "error body (dev mode)",
        "in dev mode, a request whose `Host` is not the sidecar's own (loopback, `listen`, `[mcp] allowed_hosts`): a page that rebound its DNS name to 127.0.0.1",
        "call the sidecar as `localhost`, `127.0.0.1` or its `listen` address, or add the name to `[mcp] allowed_hosts`";
    NotReady = "not_ready", 503, "error body",
        "no valid policy set is loaded",
        "operators: fix the policies (`toolgate validate` names each problem) or see /readyz";
    StoreUnavailable = "store_unavailable", 503, "error body",
        "the data store failed; nothing was changed",
        "retry later; operators: see /readyz and the logs";
    NotEligible = "not_eligible", 403, "error body",
        "the policies do not let this human approve, grant, explain, flip the kill switch, quarantine or approve a policy change",
        "ask a human that the policies make eligible for this action";
    KillSwitchForced = "kill_switch_forced", 409, "error body",
        "the kill switch is forced on by the config or `TOOLGATE_KILL_SWITCH`",
        "remove `kill_switch = true` from the config or TOOLGATE_KILL_SWITCH from the environment, then restart";
    NotShared = "not_shared", 503, "error body",
        "the change is recorded and in force on this sidecar, but the fleet's Redis did not take it yet",
        "nothing to resend: this sidecar sends it again until Redis takes it, and denies every call meanwhile (see /readyz `shared_state`)";
    NotQuarantined = "not_quarantined", 404, "error body",
        "a release named an agent that is not quarantined",
        "see GET /v1/admin/quarantine for the quarantined agents";
    NothingHeld = "nothing_held", 404, "error body",
        "no policy change is held",
        "GET /v1/policies shows whether a change is held (`held`)";
    HeldRevisionMismatch = "held_revision_mismatch", 409, "error body",
        "the held change has another revision than the one approved",
        "GET /v1/policies shows the held change (`held.revision`) and its diff";
    GrantNotLinkable = "grant_not_linkable", 422, "error body",
        "the template does not exist, lacks a slot, or the link does not validate",
        "grant a template of policies/ with ?principal and ?resource slots, an Agent or Role and a Tool";
    TooManyGrants = "too_many_grants", 409, "error body",
        "1,000 grants are alive already",
        "revoke grants no longer needed (GET /v1/grants)";
    GrantNotFound = "grant_not_found", 404, "error body",
        "no grant with this id is alive",
        "GET /v1/grants lists the grants alive";
    NotAProtectedResource = "not_a_protected_resource", 404, "error body",
        "no OAuth protected resource metadata here (`auth.jwt.audience` is not a URL, or the path names another resource)",
        "set `auth.jwt.audience` to the URL clients use for /mcp; its metadata is at /.well-known/oauth-protected-resource/<that path>";
    UnknownGate = "unknown_gate", 404, "error body",
        "no such gate",
        "POST /v1/gates/{input|context|tool_call|output|stream}";
    TooManyStreams = "too_many_streams", 429, "error body",
        "too many open streams (1,024 in all, 64 per principal)",
        "end streams with `\"final\": true`; idle ones are dropped after 10 minutes";
    StreamBlocked = "stream_blocked", 409, "error body",
        "an earlier chunk of this stream was blocked; start a new stream",
        "start a new stream; an earlier chunk of this one was blocked";
    Denied = "denied", 403, "`/v1/execute` `error`",
        "the decision was deny (the decision's own first code is used when it has one)",
        "the call was denied: see `decision` for why; do not retry unchanged";
    NotExecutable = "not_executable", 409, "`/v1/execute` `error`",
        "the tool has no executor: run it yourself and report to `/v1/results`",
        "authorize it with /v1/authorize, run it yourself, report the output to /v1/results";
    ProgramMissing = "program_missing", 503, "`/v1/execute` `error`",
        "the tool's program is not installed on this machine",
        "operators: install it (or give its absolute path in the manifest)";
    ExecutionOff = "execution_off", 503, "`/v1/execute` `error`",
        "this sidecar runs no tools (`[exec] root` is not set)",
        "operators: set `[exec] root` in the config; agents: run the tool yourself and report it to /v1/results";
    DescriptorChanged = "descriptor_changed", 200, "decision (`descriptor`)",
        "the MCP upstream changed this tool's descriptor (name, description, schemas or annotations) since it was reviewed; its calls are denied until a human approves the new one",
        "do not retry; an operator reviews the change (GET /v1/mcp/descriptors) and approves it, or runs `toolgate mcp sync`";
    DescriptorUnchanged = "descriptor_unchanged", 409, "error body",
        "the tool's live descriptor matches its review (or is approved already), or its upstream cannot be asked now",
        "nothing to approve; GET /v1/mcp/descriptors lists the changed ones";
    DescriptorMoved = "descriptor_moved", 409, "error body",
        "the live descriptor is not the one the approval names (it changed again)",
        "review the live descriptor again (GET /v1/mcp/descriptors) and approve its `offered` hash";
    NotAnMcpTool = "not_an_mcp_tool", 404, "error body",
        "no registered tool of that name forwards to an MCP upstream",
        "name a tool listed in GET /v1/mcp/descriptors `changed`";
    UpstreamUnavailable = "upstream_unavailable", 503, "`/v1/execute` `error`; MCP tool result",
        "the tool's MCP upstream is not connected (starting, crashed and restarting, or not configured here)",
        "retry shortly; operators: see /readyz `mcp` and the logs";
    UpstreamFailed = "upstream_failed", 200, "`/v1/execute` `error`; MCP tool result",
        "the tool's MCP upstream failed the call (a protocol error, a broken connection, or no answer in time)",
        "retry; operators: see the upstream's logs";
    ExecutionFailed = "execution_failed", 503, "`/v1/execute` `error`",
        "the run could not be set up (sandbox, launcher); see `/readyz` `execution`",
        "operators: see /readyz `execution` and the logs";
    NotAWorkTree = "not_a_work_tree", 503, "`/v1/execute` `error`",
        "a git tool, but the service root is not the top of a git work tree",
        "operators: git tools need `[exec] root` to be the top of a git work tree";
    ExecutionsBusy = "executions_busy", 429, "`/v1/execute` `error`",
        "more than `[exec] max_concurrent` runs at once",
        "retry shortly; operators: `[exec] max_concurrent`";
    PathDenied = "path_denied", 422, "`/v1/execute` `error`; `/v1/execute` `error` (file tools)",
        "the jail refused a path argument (outside the root, deny-listed, through a link)",
        "name a path below the service root that is not deny-listed and does not go through a link";
    OptionInjection = "option_injection", 422, "`/v1/execute` `error`",
        "an argument starts with `-` where the manifest does not allow it",
        "values may not start with `-`; prefix a path with `./`";
    InvalidRevision = "invalid_revision", 422, "`/v1/execute` `error`",
        "a git tool's revision argument is not a commit of the repository",
        "name a commit of this repository (a branch, a tag, a hash, `HEAD~1`); ranges are not revisions";
    ExitNonzero = "exit_nonzero", 200, "`/v1/execute` `error`",
        "the program exited with a non-zero code (`data` and `stderr` hold its output)",
        "read `data` and `stderr` for what the program said";
    Timeout = "timeout", 200, "`/v1/execute` `error`; `/v1/execute` `error` (file tools)",
        "the program or file tool ran out of its time budget (`limits.timeout_ms`)",
        "ask for less, or a narrower path; operators: the tool's `limits.timeout_ms`";
    Killed = "killed", 200, "`/v1/execute` `error`",
        "the program was ended by a signal (a resource limit, or killed)",
        "the program hit a resource limit or was killed; ask for less";
    LaunchFailed = "launch_failed", 200, "`/v1/execute` `error`",
        "the launcher could not start the program; when the user programs run as cannot enter the service root, the message names the directory it may not search",
        "operators: see the message and the logs; for a root that user cannot enter, make each directory on the way searchable (`chmod o+x`), move `[exec] root`, or set `[exec] run_as`";
    LauncherFailed = "launcher_failed", 200, "`/v1/execute` `error`",
        "the launcher ended without a report or exit status",
        "operators: see the logs; the launcher ended without a report";
    OutputUnparsable = "output_unparsable", 200, "`/v1/execute` `error`",
        "the output is not what the executor's `parser` expects (or was cut)",
        "operators: the tool's `parser` does not match what the program prints";
    OutputBlocked = "output_blocked", 200, "`/v1/execute` `error`",
        "the output gate blocked the output",
        "the output gate blocked the result; see `output.violations`";
    OutputSchemaMismatch = "output_schema_mismatch", 200, "`/v1/results` and `/v1/execute` `errors`",
        "the output does not match the tool's `outputSchema` (it is blocked)",
        "operators: the tool's `outputSchema` does not match what it returns";
    FileNotFound = "file_not_found", 200, "`/v1/execute` `error` (file tools)",
        "no such file (or parent directory)",
        "check the path with list_files (paths are relative to the service root); write_file creates new files";
    NotAFile = "not_a_file", 200, "`/v1/execute` `error` (file tools)",
        "a directory (or device, FIFO, socket) where a file is needed",
        "name a file; use list_files for a directory";
    NotADirectory = "not_a_directory", 200, "`/v1/execute` `error` (file tools)",
        "a file where a directory is needed",
        "name a directory, or read the file with read_file";
    NotText = "not_text", 200, "`/v1/execute` `error` (file tools)",
        "binary or not UTF-8",
        "only UTF-8 text files can be read or edited; binary files are not served";
    TooLarge = "too_large", 200, "`/v1/execute` `error` (file tools)",
        "over `max_bytes`, or an edit's result over 10 MB",
        "read less (a smaller `max_bytes`, or search_files), or split the change";
    MatchCountMismatch = "match_count_mismatch", 200, "`/v1/execute` `error` (file tools)",
        "an edit's matches differ from its `count`",
        "make `spec` match exactly the intended text, or set `count` to the number found; count_matches checks first";
    OverlappingEdits = "overlapping_edits", 200, "`/v1/execute` `error` (file tools)",
        "two edits target overlapping text",
        "merge the overlapping edits into one, or target disjoint text";
    InvalidEdit = "invalid_edit", 200, "`/v1/execute` `error` (file tools)",
        "an edit that cannot run as written",
        "fix the named edit: a non-empty `spec`, `content` for replace/append_after/prepend_before, none for delete, `count` of at least 1";
    InvalidPattern = "invalid_pattern", 200, "`/v1/execute` `error` (file tools)",
        "a regex that does not compile or is over the size limits",
        "fix the pattern (Rust regex syntax, no look-around or back-references), or set `literal`";
    ResourceBusy = "resource_busy", 200, "`/v1/execute` `error` (file tools)",
        "another call holds the file's lock",
        "another call is changing this file: retry in a moment, and read it again before editing";
    InvalidArguments = "invalid_arguments", 200, "`/v1/execute` `error` (file tools)",
        "the manifest allows arguments the built-in tool does not know",
        "operators: the tool's manifest allows arguments the built-in does not know";
    IoError = "io_error", 200, "`/v1/execute` `error` (file tools)",
        "another I/O failure",
        "retry; operators: see the sidecar's logs";
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Code;

    #[test]
    fn each_code_is_one_snake_case_word_used_once() {
        let mut seen = std::collections::BTreeSet::new();
        for c in Code::ALL {
            let s = c.as_str();
            assert!(
                s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') && !s.starts_with('_'),
                "{s}"
            );
            assert!(seen.insert(s), "{s} twice");
            assert!((200..600).contains(&c.status()), "{s}");
            assert!(!c.hint().is_empty() && !c.meaning().is_empty(), "{s}");
        }
    }
}
