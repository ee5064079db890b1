//! What the leader's front sends its server for a run of one client's commands, and what it
//! does with each reply (`docs/apps/redis.md`, "Clients"): a `ROLE` behind the commands that
//! may have had effects, placed outside any transaction, whose offset the replies before it
//! wait for. Pure.

use crate::command::{disposition, transaction, Disposition, Transaction};
use crate::resp::{encode_command, Command};

/// One step of the reply path, in the order the client's replies go out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The next reply from the server is the client's: hold it.
    Reply,
    /// The next reply is the server's answer to a `MULTI` the front planned as opening a
    /// transaction: it must be `+OK`. Otherwise (`MULTI x` is refused with an error) the
    /// server is not queuing, the commands planned behind it as queued ran at once with no
    /// `ROLE` behind them, and their replies must never go out before a commit.
    Multi,
    /// The next reply is to a command the front planned as queued inside a transaction: it
    /// must be `+QUEUED` or an error (a command rejected while queuing), else the server was
    /// not queuing and the reply may carry an effect not yet committed.
    Queued,
    /// The next reply from the server is the front's `ROLE`: wait until the stream up to its
    /// offset is committed, then release what is held.
    Role,
    /// A reply of the front's own (a refusal), held in order with the others.
    Local(Vec<u8>),
    /// The next reply from the server is dropped, and this one held instead: a refusal inside
    /// a transaction, for which the front sent the server a command it rejects, so that the
    /// server fails the `EXEC` as it does after any command rejected while queuing.
    Replace(Vec<u8>),
    /// Release what is held, then close the connection (`QUIT`).
    Quit,
}

/// The bytes for the server and the steps for the replies.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub to_server: Vec<u8>,
    pub steps: Vec<Step>,
}

/// A connection's transaction state, carried from one run of commands to the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Session {
    pub in_multi: bool,
}

/// Plans `commands` (parsed from `buf`, in order) for a connection in state `session`, which
/// it updates. After a [`Step::Quit`] nothing more is planned.
pub fn plan(buf: &[u8], commands: &[Command], session: &mut Session) -> Plan {
    let mut plan = Plan::default();
    // Commands forwarded since the last ROLE that ran outside a transaction (or an EXEC):
    // their effects, if any, are in the stream by the time a ROLE runs.
    let mut dirty = false;
    let mut at = 0;
    for command in commands {
        let bytes = &buf[at..at + command.frame_bytes];
        let args = shift(command, at);
        at += command.frame_bytes;
        match disposition(&args, buf) {
            Disposition::Skip => {}
            Disposition::Refuse(why) => {
                let reply = format!("-{why}\r\n").into_bytes();
                if session.in_multi {
                    encode_command(&[REJECTED_COMMAND], &mut plan.to_server);
                    plan.steps.push(Step::Replace(reply));
                } else {
                    plan.steps.push(Step::Local(reply));
                }
            }
            Disposition::Quit => {
                if dirty && !session.in_multi {
                    push_role(&mut plan);
                }
                plan.steps.push(Step::Local(b"+OK\r\n".to_vec()));
                plan.steps.push(Step::Quit);
                return plan;
            }
            Disposition::Forward => {
                let step = match transaction(&args, buf) {
                    Transaction::Begins if !session.in_multi => {
                        if dirty {
                            push_role(&mut plan);
                            dirty = false;
                        }
                        session.in_multi = true;
                        Step::Multi
                    }
                    Transaction::Ends => {
                        session.in_multi = false;
                        dirty = true;
                        Step::Reply
                    }
                    // Queued (a nested MULTI is refused with an error, and changes nothing).
                    Transaction::Begins | Transaction::Neither if session.in_multi => Step::Queued,
                    Transaction::Begins | Transaction::Neither => {
                        dirty = true;
                        Step::Reply
                    }
                };
                plan.to_server.extend_from_slice(bytes);
                plan.steps.push(step);
            }
        }
    }
    if dirty && !session.in_multi {
        push_role(&mut plan);
    }
    plan
}

/// Whether the server's `reply` is one `step` may hold. `Err`: the server's transaction
/// state is not the one planned, and the connection must close without releasing this reply
/// or any after it (what is held before it was checked already).
pub fn check_reply(step: &Step, reply: &[u8]) -> Result<(), String> {
    let is_error = matches!(reply.first(), Some(b'-' | b'!'));
    let ok = match step {
        Step::Multi => reply == b"+OK\r\n",
        Step::Queued => reply == b"+QUEUED\r\n" || is_error,
        _ => true,
    };
    if ok {
        return Ok(());
    }
    Err(format!(
        "the server answered {:?} where the front planned {step:?}: its transaction state is not \
         the one the front tracks",
        String::from_utf8_lossy(&reply[..reply.len().min(64)])
    ))
}

/// `command` with its ranges made relative to the whole buffer (it was parsed at `at`).
fn shift(command: &Command, at: usize) -> Command {
    Command {
        args: command.args.iter().map(|r| r.start + at..r.end + at).collect(),
        frame_bytes: command.frame_bytes,
    }
}

/// A command no Redis knows: rejected while queuing, it makes the transaction's `EXEC` fail.
const REJECTED_COMMAND: &[u8] = b"MU-FRONT-REFUSED";

fn push_role(plan: &mut Plan) {
    encode_command(&[b"ROLE"], &mut plan.to_server);
    plan.steps.push(Step::Role);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{parse_command, Limits};

    /// Parses `buf` whole into commands, as the front does.
    fn commands(buf: &[u8]) -> Vec<Command> {
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(c) = parse_command(&buf[at..], &Limits::CLIENT).unwrap() {
            at += c.frame_bytes;
            out.push(c);
        }
        assert_eq!(at, buf.len());
        out
    }

    fn steps(text: &str, session: &mut Session) -> (String, Vec<Step>) {
        let buf = text.as_bytes();
        let p = plan(buf, &commands(buf), session);
        (String::from_utf8(p.to_server).unwrap(), p.steps)
    }

    const ROLE: &str = "*1\r\n$4\r\nROLE\r\n";

    #[test]
    fn one_role_behind_a_pipeline() {
        let mut s = Session::default();
        let (to, st) = steps("SET a 1\r\nGET a\r\nINCR n\r\n", &mut s);
        assert_eq!(to, format!("SET a 1\r\nGET a\r\nINCR n\r\n{ROLE}"));
        assert_eq!(st, vec![Step::Reply, Step::Reply, Step::Reply, Step::Role]);
    }

    #[test]
    fn the_role_goes_before_multi_and_after_exec() {
        let mut s = Session::default();
        let (to, st) = steps("SET a 1\r\nMULTI\r\nINCR n\r\nEXEC\r\n", &mut s);
        assert_eq!(to, format!("SET a 1\r\n{ROLE}MULTI\r\nINCR n\r\nEXEC\r\n{ROLE}"));
        use Step::*;
        assert_eq!(st, vec![Reply, Role, Multi, Queued, Reply, Role]);
        assert!(!s.in_multi);
    }

    #[test]
    fn a_transaction_across_runs_gets_no_role_inside() {
        let mut s = Session::default();
        let (to, st) = steps("MULTI\r\nINCR n\r\n", &mut s);
        assert_eq!(to, "MULTI\r\nINCR n\r\n");
        assert_eq!(st, vec![Step::Multi, Step::Queued]);
        assert!(s.in_multi);
        let (to, st) = steps("SET b 2\r\n", &mut s);
        assert_eq!(to, "SET b 2\r\n", "queued, no effect yet");
        assert_eq!(st, vec![Step::Queued]);
        let (to, st) = steps("DISCARD\r\n", &mut s);
        assert_eq!(to, format!("DISCARD\r\n{ROLE}"));
        assert_eq!(st, vec![Step::Reply, Step::Role]);
    }

    #[test]
    fn refusals_and_quit_keep_their_place() {
        let mut s = Session::default();
        let (to, st) = steps("SET a 1\r\nCONFIG GET x\r\n\r\nQUIT\r\nGET a\r\n", &mut s);
        assert_eq!(to, format!("SET a 1\r\n{ROLE}"));
        assert_eq!(st.len(), 5);
        assert_eq!(st[0], Step::Reply);
        assert!(matches!(&st[1], Step::Local(e) if e.starts_with(b"-ERR CONFIG is refused")));
        assert_eq!(st[2], Step::Role);
        assert_eq!(st[3], Step::Local(b"+OK\r\n".to_vec()));
        assert_eq!(st[4], Step::Quit);
    }

    #[test]
    fn a_refusal_inside_a_transaction_fails_its_exec_at_the_server() {
        let mut s = Session::default();
        let (to, st) = steps("MULTI\r\nCONFIG GET x\r\nEXEC\r\n", &mut s);
        assert_eq!(to, format!("MULTI\r\n*1\r\n$16\r\nMU-FRONT-REFUSED\r\nEXEC\r\n{ROLE}"));
        assert_eq!(st.len(), 4);
        assert!(matches!(&st[1], Step::Replace(e) if e.starts_with(b"-ERR CONFIG is refused")));
    }

    /// `MULTI x` is refused by the server, which then runs the `SET` at once: the `+OK` the
    /// front would otherwise release with no `ROLE` behind it must be caught.
    #[test]
    fn a_multi_the_server_refuses_stops_the_replies() {
        let mut s = Session::default();
        let (to, st) = steps("MULTI x\r\nSET a 1\r\n", &mut s);
        assert_eq!(to, "MULTI x\r\nSET a 1\r\n");
        let replies: [&[u8]; 2] = [b"-ERR wrong number of arguments for 'multi'\r\n", b"+OK\r\n"];
        assert_eq!(st.len(), replies.len());
        assert!(st.iter().all(|step| *step != Step::Role), "no ROLE in a planned transaction");
        assert!(check_reply(&st[0], replies[0]).is_err(), "MULTI's error must stop the run");
        // Had the server opened the transaction, its replies pass.
        assert_eq!(check_reply(&st[0], b"+OK\r\n"), Ok(()));
        assert_eq!(check_reply(&st[1], b"+QUEUED\r\n"), Ok(()));
        assert_eq!(check_reply(&st[1], b"-ERR unknown command\r\n"), Ok(()));
        assert!(check_reply(&st[1], replies[1]).is_err(), "an executed SET's +OK is not queued");
    }

    #[test]
    fn only_refusals_need_no_server() {
        let mut s = Session::default();
        let (to, st) = steps("DEBUG DIGEST\r\n", &mut s);
        assert!(to.is_empty());
        assert_eq!(st.len(), 1);
    }
}
