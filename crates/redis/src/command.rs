//! What the front does with each client command (`docs/apps/redis.md`, "Command coverage"):
//! forward it, refuse it, or answer it itself; and how it moves the connection's transaction
//! state, which decides where the front may put its `ROLE`.

use crate::resp::Command;

/// The front's decision for one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Sent to the private server unchanged.
    Forward,
    /// Answered with this error line (without `-` and CRLF), never sent on.
    Refuse(String),
    /// `QUIT`: answered `+OK`, then the connection closes.
    Quit,
    /// An empty command (an empty inline line, `*0`): the server would skip it without a reply.
    Skip,
}

/// How a command moves its connection's `MULTI` state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transaction {
    /// `MULTI`: from here commands are queued.
    Begins,
    /// `EXEC`, `DISCARD`, `RESET`: no longer in a transaction (whatever the reply).
    Ends,
    Neither,
}

/// Why a whole command is refused, if it is.
fn refused_command(name: &str) -> Option<&'static str> {
    Some(match name {
        "CONFIG" | "DEBUG" | "SHUTDOWN" | "SAVE" | "BGSAVE" | "BGREWRITEAOF" | "MODULE" => {
            "it administers one server, and would not be replicated"
        }
        "REPLICAOF" | "SLAVEOF" | "SYNC" | "PSYNC" | "REPLCONF" | "FAILOVER" => {
            "Mu replicates this server; its replication is not the client's to change"
        }
        "WAIT" | "WAITAOF" => {
            "Mu commits every write before it answers; WAIT would count Mu's own link"
        }
        "MONITOR" | "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" | "UNSUBSCRIBE" | "PUNSUBSCRIBE"
        | "SUNSUBSCRIBE" => "the connection would leave request and reply mode",
        "MIGRATE" | "CLUSTER" | "READONLY" | "READWRITE" | "ASKING" => {
            "this is not a Redis Cluster"
        }
        _ => return None,
    })
}

/// Why a subcommand is refused, if it is.
fn refused_subcommand(name: &str, sub: &str) -> Option<&'static str> {
    match (name, sub) {
        ("CLIENT", "REPLY" | "KILL" | "PAUSE" | "UNPAUSE" | "TRACKING" | "NO-EVICT") => {
            Some("the front counts one reply per command and owns the server's connections")
        }
        ("ACL", sub) if sub != "WHOAMI" && sub != "CAT" => {
            Some("users and permissions are one server's, and would not be replicated")
        }
        ("LATENCY" | "SLOWLOG", "RESET") => Some("it administers one server"),
        _ => None,
    }
}

/// What the front does with `command` (parsed from `buf`).
pub fn disposition(command: &Command, buf: &[u8]) -> Disposition {
    if command.args.is_empty() {
        return Disposition::Skip;
    }
    let name = command.name(buf);
    if name == "QUIT" {
        return Disposition::Quit;
    }
    let why =
        refused_command(&name).or_else(|| refused_subcommand(&name, &command.arg_upper(buf, 1)));
    match why {
        Some(why) => Disposition::Refuse(format!(
            "ERR {name} is refused by Mu's Redis front: {why} (docs/apps/redis.md)"
        )),
        None => Disposition::Forward,
    }
}

/// How `command` moves the transaction state.
pub fn transaction(command: &Command, buf: &[u8]) -> Transaction {
    match command.name(buf).as_str() {
        "MULTI" => Transaction::Begins,
        "EXEC" | "DISCARD" | "RESET" => Transaction::Ends,
        _ => Transaction::Neither,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{encode_command, parse_command, Limits};

    fn of(args: &[&[u8]]) -> (Command, Vec<u8>) {
        let mut buf = Vec::new();
        encode_command(args, &mut buf);
        (parse_command(&buf, &Limits::CLIENT).unwrap().unwrap(), buf)
    }

    #[test]
    fn data_commands_are_forwarded_whatever_their_case() {
        for args in [
            &[&b"set"[..], b"k", b"v"][..],
            &[b"EvAl", b"return 1", b"0"],
            &[b"CLIENT", b"SETNAME", b"x"],
        ] {
            let (c, buf) = of(args);
            assert_eq!(disposition(&c, &buf), Disposition::Forward, "{args:?}");
        }
    }

    #[test]
    fn admin_and_replication_commands_are_refused_with_their_name() {
        for args in [
            &[&b"config"[..], b"set", b"save", b""][..],
            &[b"DEBUG", b"DIGEST"],
            &[b"shutdown"],
            &[b"replicaof", b"no", b"one"],
            &[b"client", b"reply", b"off"],
            &[b"acl", b"setuser", b"x"],
            &[b"subscribe", b"ch"],
        ] {
            let (c, buf) = of(args);
            match disposition(&c, &buf) {
                Disposition::Refuse(e) => {
                    let name = c.name(&buf);
                    assert!(e.starts_with(&format!("ERR {name} is refused")), "{e}");
                }
                other => panic!("{args:?}: {other:?}"),
            }
        }
        let (c, buf) = of(&[b"acl", b"whoami"]);
        assert_eq!(disposition(&c, &buf), Disposition::Forward);
    }

    #[test]
    fn quit_and_empty_commands_are_the_fronts() {
        let (c, buf) = of(&[b"quit"]);
        assert_eq!(disposition(&c, &buf), Disposition::Quit);
        let c = parse_command(b"\r\n", &Limits::CLIENT).unwrap().unwrap();
        assert_eq!(disposition(&c, b"\r\n"), Disposition::Skip);
    }

    #[test]
    fn transactions_begin_and_end() {
        let cases: [(&[u8], Transaction); 5] = [
            (b"multi", Transaction::Begins),
            (b"EXEC", Transaction::Ends),
            (b"discard", Transaction::Ends),
            (b"reset", Transaction::Ends),
            (b"incr", Transaction::Neither),
        ];
        for (name, expected) in cases {
            let (c, buf) = of(&[name]);
            assert_eq!(transaction(&c, &buf), expected);
        }
    }
}
