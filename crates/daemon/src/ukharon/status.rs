//! What each node process publishes in the run directory (`ukharon-<id>.status.json`,
//! replaced whole every few milliseconds), and `mu ukharon status`, which shows them.

use super::config::{Role, UkharonConfig};
use super::pid::{inspect, NodePid};
pub use mu_membership::ActiveSpan;
use mu_ukharon::view::View;
use serde_json::{json, Value};
use std::path::Path;

/// A view as a status shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewSummary {
    pub epoch: u64,
    /// (node, unique id), by node.
    pub members: Vec<(u16, u64)>,
    pub primary: Option<u16>,
}

impl ViewSummary {
    pub fn of(view: &View) -> ViewSummary {
        let members = view.members.iter().map(|m| (m.node, m.uid)).collect();
        ViewSummary { epoch: view.epoch, members, primary: view.primary }
    }

    pub fn nodes(&self) -> Vec<u16> {
        self.members.iter().map(|&(n, _)| n).collect()
    }

    pub fn has(&self, node: u16) -> bool {
        self.members.iter().any(|&(n, _)| n == node)
    }

    fn to_json(&self) -> Value {
        let members: Vec<Value> =
            self.members.iter().map(|&(node, uid)| json!({"node": node, "uid": uid})).collect();
        json!({"epoch": self.epoch, "members": members, "primary": self.primary})
    }

    fn from_json(view: &Value) -> Option<ViewSummary> {
        let u = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
        Some(ViewSummary {
            epoch: u(view, "epoch")?,
            members: view
                .get("members")?
                .as_array()?
                .iter()
                .map(|m| Some((u(m, "node")? as u16, u(m, "uid")?)))
                .collect::<Option<_>>()?,
            primary: u(view, "primary").map(|p| p as u16),
        })
    }
}

/// A coordinator leader's last clique (§4.2): the view its graph was of, the members it kept,
/// and why the others went: links the catastrophic detector's reports held down, members the
/// crash detector or the ring reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliqueSummary {
    pub epoch: u64,
    pub keep: Vec<u16>,
    pub links_down: Vec<(u16, u16)>,
    pub isolated: Vec<u16>,
}

impl CliqueSummary {
    pub fn of(d: &mu_ukharon::detect::graph::Decision) -> CliqueSummary {
        let keep = d.members.iter().map(|m| m.node).collect();
        let (links_down, isolated) = (d.links_down.clone(), d.isolated.clone());
        CliqueSummary { epoch: d.epoch, keep, links_down, isolated }
    }

    fn to_json(&self) -> Value {
        let links: Vec<Value> = self.links_down.iter().map(|&(a, b)| json!([a, b])).collect();
        json!({"epoch": self.epoch, "keep": self.keep, "links_down": links,
               "isolated": self.isolated})
    }

    fn from_json(v: &Value) -> Option<CliqueSummary> {
        let nodes = |k: &str| -> Option<Vec<u16>> {
            v.get(k)?.as_array()?.iter().map(|n| n.as_u64().map(|n| n as u16)).collect()
        };
        let links_down = v
            .get("links_down")?
            .as_array()?
            .iter()
            .map(|l| Some((l.get(0)?.as_u64()? as u16, l.get(1)?.as_u64()? as u16)))
            .collect::<Option<_>>()?;
        Some(CliqueSummary {
            epoch: v.get("epoch")?.as_u64()?,
            keep: nodes("keep")?,
            links_down,
            isolated: nodes("isolated")?,
        })
    }
}

/// One node's status file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    pub id: u16,
    pub role: Role,
    pub pid: u32,
    /// When it was written, on the host's `CLOCK_MONOTONIC`.
    pub written_ns: u64,
    pub view: Option<ViewSummary>,
    /// A coordinator: whether it leads.
    pub leading: bool,
    /// A coordinator: the last clique it asked for as the leader, if any.
    pub clique: Option<CliqueSummary>,
    /// A member: its unique id in the latest view, if it is a member.
    pub uid: Option<u64>,
    /// A member: whether `Active(latest view)` was true when the status was written.
    pub active: bool,
    /// A member: when `Active` was true, per view.
    pub spans: Vec<ActiveSpan>,
    /// A member: (epoch, when it learnt that view).
    pub learnt: Vec<(u64, u64)>,
    /// A member: the latest views it learnt, oldest first (at most [`HISTORY_KEPT`]), so that
    /// a view that lasted less than a status period is still seen.
    pub history: Vec<ViewSummary>,
    pub problem: Option<String>,
}

/// How many views a member's status keeps in its `history`.
pub const HISTORY_KEPT: usize = 16;

impl NodeStatus {
    pub fn to_json(&self) -> Value {
        let view = self.view.as_ref().map(ViewSummary::to_json);
        let history: Vec<Value> = self.history.iter().map(ViewSummary::to_json).collect();
        let spans: Vec<Value> = self
            .spans
            .iter()
            .map(|s| json!({"epoch": s.epoch, "from_ns": s.from_ns, "until_ns": s.until_ns}))
            .collect();
        let learnt: Vec<Value> = self
            .learnt
            .iter()
            .map(|&(epoch, at_ns)| json!({"epoch": epoch, "at_ns": at_ns}))
            .collect();
        json!({
            "id": self.id,
            "role": self.role.name(),
            "pid": self.pid,
            "written_ns": self.written_ns,
            "view": view,
            "leading": self.leading,
            "clique": self.clique.as_ref().map(CliqueSummary::to_json),
            "uid": self.uid,
            "active": self.active,
            "spans": spans,
            "learnt": learnt,
            "history": history,
            "problem": self.problem,
        })
    }

    pub fn from_json(v: &Value) -> Option<NodeStatus> {
        let u = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
        let role = match v.get("role")?.as_str()? {
            "coordinator" => Role::Coordinator,
            "member" => Role::Member,
            "cache" => Role::Cache,
            _ => return None,
        };
        let view = match v.get("view")? {
            Value::Null => None,
            view => Some(ViewSummary::from_json(view)?),
        };
        // Absent in the statuses of builds from before it was added.
        let history = match v.get("history") {
            None => Vec::new(),
            Some(h) => h.as_array()?.iter().map(ViewSummary::from_json).collect::<Option<_>>()?,
        };
        let spans = v
            .get("spans")?
            .as_array()?
            .iter()
            .map(|s| {
                let (epoch, from_ns) = (u(s, "epoch")?, u(s, "from_ns")?);
                Some(ActiveSpan { epoch, from_ns, until_ns: u(s, "until_ns")? })
            })
            .collect::<Option<_>>()?;
        let learnt = v
            .get("learnt")?
            .as_array()?
            .iter()
            .map(|l| Some((u(l, "epoch")?, u(l, "at_ns")?)))
            .collect::<Option<_>>()?;
        Some(NodeStatus {
            id: u(v, "id")? as u16,
            role,
            pid: u(v, "pid")? as u32,
            written_ns: u(v, "written_ns")?,
            view,
            leading: v.get("leading")?.as_bool()?,
            clique: v.get("clique").and_then(CliqueSummary::from_json),
            uid: u(v, "uid"),
            active: v.get("active")?.as_bool()?,
            spans,
            learnt,
            history,
            problem: v.get("problem").and_then(Value::as_str).map(str::to_string),
        })
    }

    /// Writes the status whole: into a file beside it, then renamed over it, so that a reader
    /// never sees half of one.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let partial = path.with_extension("json.partial");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .map_err(|e| format!("writing {}: {e}", partial.display()))?;
        file.write_all(self.to_json().to_string().as_bytes())
            .map_err(|e| format!("writing {}: {e}", partial.display()))?;
        std::fs::rename(&partial, path).map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// The status in `path`, if there is one that reads whole.
    pub fn read(path: &Path) -> Option<NodeStatus> {
        let text = std::fs::read_to_string(path).ok()?;
        NodeStatus::from_json(&serde_json::from_str(&text).ok()?)
    }
}

/// A status older than this, of a process that runs, is shown as stale (the process is
/// stopped or starved).
const STALE_NS: u64 = 1_000_000_000;

/// `mu ukharon status`.
pub fn status(config_path: &Path, as_json: bool) -> Result<(), String> {
    let config = UkharonConfig::load(config_path)?;
    let now_ns = mu_procs::clock::monotonic_ns();
    let mut rows = Vec::new();
    for id in config.nodes() {
        let running = match inspect(&config, id)? {
            NodePid::Running(target) => Some(target.pid),
            _ => None,
        };
        let status = NodeStatus::read(&config.status_path(id)).filter(|s| Some(s.pid) == running);
        let state = match (&status, running) {
            (_, None) => "down",
            (None, Some(_)) => "starting",
            (Some(s), Some(_)) if now_ns.saturating_sub(s.written_ns) > STALE_NS => "stale",
            (Some(_), Some(_)) => "up",
        };
        rows.push((id, config.role(id).expect("a node of the file"), running, state, status));
    }
    if as_json {
        let out: Vec<Value> = rows
            .iter()
            .map(|(id, role, pid, state, status)| match status {
                Some(s) => {
                    let mut v = s.to_json();
                    v["state"] = json!(state);
                    v["up"] = json!(*state == "up");
                    v
                }
                None => json!({"id": id, "role": role.name(), "pid": pid, "state": state,
                               "up": false}),
            })
            .collect();
        println!("{}", Value::Array(out));
        return Ok(());
    }
    print_table(&rows);
    print_notes(&rows);
    Ok(())
}

/// A node of the file as `status` found it: id, role, running pid, state, its status file.
type Row = (u16, Role, Option<u32>, &'static str, Option<NodeStatus>);

fn print_table(rows: &[Row]) {
    println!(
        "{:<5} {:<12} {:>8} {:<9} {:>6} {:<16} {:<7} {:<7}",
        "node", "role", "pid", "state", "epoch", "members", "active", "leading"
    );
    for (id, role, pid, state, status) in rows {
        let pid = pid.map_or("-".to_string(), |p| p.to_string());
        let view = status.as_ref().and_then(|s| s.view.as_ref());
        let epoch = view.map_or("-".to_string(), |v| v.epoch.to_string());
        let members = view.map_or("-".to_string(), |v| node_list(&v.nodes()));
        let yes = |b: bool| if b { "yes" } else { "no" };
        let (active, leading) = match (role, status) {
            (Role::Member | Role::Cache, Some(s)) => (yes(s.active), "-"),
            (Role::Coordinator, Some(s)) => ("-", yes(s.leading)),
            (_, None) => ("-", "-"),
        };
        println!(
            "{id:<5} {:<12} {pid:>8} {state:<9} {epoch:>6} {members:<16} {active:<7} {leading:<7}",
            role.name()
        );
    }
    let leaders: Vec<String> = rows
        .iter()
        .filter(|r| r.3 == "up" && r.4.as_ref().is_some_and(|s| s.leading))
        .map(|r| r.0.to_string())
        .collect();
    match leaders.is_empty() {
        true => println!("leader: none"),
        false => println!("leader: coordinator {}", leaders.join(", ")),
    }
}

/// What the table has no room for: the leader's last clique and why it left nodes out (§4.2),
/// and each running node's last problem (a coordinator still rejoining says so).
fn print_notes(rows: &[Row]) {
    for (id, _, _, state, status) in rows {
        let Some(s) = status.as_ref().filter(|_| *state == "up") else { continue };
        if let Some(c) = s.clique.as_ref().filter(|_| s.leading) {
            let links: Vec<String> = c.links_down.iter().map(|(a, b)| format!("{a}-{b}")).collect();
            let links = if links.is_empty() { "none".into() } else { links.join(",") };
            println!(
                "coordinator {id}: last clique of view {}: kept {}, links down {links}, isolated {}",
                c.epoch,
                node_list(&c.keep),
                node_list(&c.isolated)
            );
        }
        if let Some(problem) = &s.problem {
            println!("node {id}: {problem}");
        }
    }
}

/// `3,4,5`, or `none`.
pub fn node_list(nodes: &[u16]) -> String {
    if nodes.is_empty() {
        return "none".into();
    }
    nodes.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reads_back_as_written() {
        let s = NodeStatus {
            id: 4,
            role: Role::Member,
            pid: 77,
            written_ns: 123,
            view: Some(ViewSummary { epoch: 3, members: vec![(3, 9), (4, 10)], primary: None }),
            leading: false,
            clique: Some(CliqueSummary {
                epoch: 3,
                keep: vec![3],
                links_down: vec![(3, 4)],
                isolated: vec![],
            }),
            uid: Some(10),
            active: true,
            spans: vec![ActiveSpan { epoch: 3, from_ns: 5, until_ns: 8 }],
            learnt: vec![(3, 4)],
            history: vec![ViewSummary { epoch: 2, members: vec![(3, 9)], primary: Some(3) }],
            problem: Some("refused".into()),
        };
        assert_eq!(NodeStatus::from_json(&s.to_json()), Some(s));
        assert_eq!(NodeStatus::from_json(&json!({"id": 1})), None);
    }
}
