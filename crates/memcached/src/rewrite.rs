//! What the front does with each command (`docs/apps/memcached.md`, "Command coverage"), and
//! how a replicated command is rewritten for the server: every exptime becomes 0 (the servers
//! never expire anything themselves) and the expiry it asked for is noted, per key, for the
//! state machine's table.

use crate::text::{base64_decode, data, line, number, tokens};

/// What the front does with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Kind {
    /// Through the log, applied by every replica: writes, and reads (linearizable).
    Replicated,
    /// Answered by the replica's own server without the log (`version`, `stats`, `verbosity`):
    /// they read or change nothing the replicas share.
    Local,
    /// `stats expiries`: the replica's expiry table, answered by the front.
    Expiries,
    /// `mn` with nothing before it: answered `MN` by the front.
    NoOp,
    /// `quit`: the front closes the connection.
    Quit,
    /// Refused with this reply.
    Refused(String),
}

/// What the front does with the request `frame` (a whole request, as parsed).
pub fn kind(frame: &[u8]) -> Kind {
    let tokens = tokens(line(frame));
    // An empty line: memcached's own answer.
    let Some(&command) = tokens.first() else { return Kind::Refused("ERROR\r\n".into()) };
    let refuse = |why: &str| {
        Kind::Refused(format!(
            "CLIENT_ERROR {} is refused by the replicated front: {why}\r\n",
            String::from_utf8_lossy(command)
        ))
    };
    match command {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" | b"get" | b"gets"
        | b"gat" | b"gats" | b"touch" | b"incr" | b"decr" | b"delete" | b"mg" | b"ms" | b"md"
        | b"ma" => match plan(frame) {
            Err(why) => refuse(&why),
            Ok(_) => Kind::Replicated,
        },
        b"flush_all" => match tokens.get(1).and_then(|t| number(t)) {
            Some(delay) if delay != 0 => {
                refuse("a delayed flush would run by each server's own clock")
            }
            _ => Kind::Replicated,
        },
        b"stats" if tokens.get(1) == Some(&&b"expiries"[..]) => Kind::Expiries,
        b"version" | b"stats" | b"verbosity" => Kind::Local,
        b"mn" => Kind::NoOp,
        b"quit" => Kind::Quit,
        b"shutdown" | b"slabs" | b"lru" | b"lru_crawler" | b"cache_memlimit" | b"watch"
        | b"misbehave" | b"debugtime" | b"extstore" => {
            refuse("an administrative command, not replicated (it would change one server only)")
        }
        b"me" => refuse("it shows the server's own clock and expiry, not the cluster's"),
        // Anything else is not memcached's: its own answer.
        _ => Kind::Refused("ERROR\r\n".into()),
    }
}

/// An exptime the client gave, in seconds as memcached reads it.
pub type Exptime = i64;

/// What a command may do to one key's expiry, decided by the state machine from the key's CAS
/// before and after the command (`docs/apps/memcached.md`, "Expiry"). A key found missing after
/// the command leaves the table in every case.
#[derive(Debug, Default, PartialEq, Eq, Clone)]
pub struct KeyEffect {
    /// The key as the server knows it (base64 keys decoded).
    pub key: Vec<u8>,
    /// The expiry if the command stored the item (it was missing before, or its CAS changed).
    pub on_store: Option<Exptime>,
    /// The expiry if the command created the item (autovivify: `N` flags); before `on_store`.
    pub on_create: Option<Exptime>,
    /// The expiry if the item exists after the command and neither of the above applied.
    pub on_hit: Option<Exptime>,
    /// The item may be removed (a delete): look it up after the command if it has an expiry.
    pub may_remove: bool,
}

/// A replicated command as the server gets it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The command, exptimes rewritten to 0.
    pub to_server: Vec<u8>,
    pub keys: Vec<KeyEffect>,
    /// `flush_all`: the table is emptied.
    pub flush: bool,
    /// The key whose remaining TTL the reply's `t` flag reports (a meta command with `t`).
    pub ttl_reply_key: Option<Vec<u8>>,
}

/// The plan of a replicated request, or why it is refused.
pub fn plan(frame: &[u8]) -> Result<Plan, String> {
    let tokens = tokens(line(frame));
    let unchanged =
        |keys: Vec<KeyEffect>| Plan { to_server: frame.to_vec(), keys, ..Plan::default() };
    let Some(&command) = tokens.first() else { return Ok(unchanged(vec![])) };
    match command {
        b"set" | b"add" | b"replace" | b"cas" => Ok(storage(frame, &tokens)),
        b"touch" if (3..=4).contains(&tokens.len()) => Ok(match number(tokens[2]) {
            Some(exptime) => Plan {
                to_server: rebuilt(&tokens, &[(2, b"0".to_vec())], &[]),
                keys: vec![KeyEffect {
                    key: tokens[1].to_vec(),
                    on_hit: Some(exptime),
                    ..Default::default()
                }],
                ..Plan::default()
            },
            None => unchanged(vec![]),
        }),
        b"gat" | b"gats" if tokens.len() >= 3 => Ok(match number(tokens[1]) {
            Some(exptime) => Plan {
                to_server: rebuilt(&tokens, &[(1, b"0".to_vec())], &[]),
                keys: tokens[2..]
                    .iter()
                    .map(|k| KeyEffect {
                        key: k.to_vec(),
                        on_hit: Some(exptime),
                        ..Default::default()
                    })
                    .collect(),
                ..Plan::default()
            },
            None => unchanged(vec![]),
        }),
        b"delete" if tokens.len() >= 2 => Ok(unchanged(vec![KeyEffect {
            key: tokens[1].to_vec(),
            may_remove: true,
            ..Default::default()
        }])),
        b"flush_all" => Ok(Plan { flush: true, ..unchanged(vec![]) }),
        b"mg" | b"ms" | b"md" | b"ma" if tokens.len() >= 2 => meta(frame, &tokens),
        _ => Ok(unchanged(vec![])),
    }
}

/// `set`, `add`, `replace`, `cas`: `<command> <key> <flags> <exptime> <bytes> [<cas>] [noreply]`.
fn storage(frame: &[u8], tokens: &[&[u8]]) -> Plan {
    let exptime = (tokens.len() >= 5).then(|| number(tokens[3])).flatten();
    let (Some(exptime), Some(_)) = (exptime, crate::text::data_length(tokens)) else {
        // Malformed: the server refuses it as it is.
        return Plan { to_server: frame.to_vec(), ..Plan::default() };
    };
    let mut to_server = rebuilt(tokens, &[(3, b"0".to_vec())], &[]);
    to_server.extend_from_slice(data(frame));
    let key = KeyEffect { key: tokens[1].to_vec(), on_store: Some(exptime), ..Default::default() };
    Plan { to_server, keys: vec![key], ..Plan::default() }
}

/// Meta commands: `mg|md|ma <key> <flags>*`, `ms <key> <datalen> <flags>*`. TTL flags (`T`)
/// are taken out, autovivify TTLs (`N`) become `N0`; flags that would show or use a server's
/// own clock or its own access history are refused.
fn meta(frame: &[u8], tokens: &[&[u8]]) -> Result<Plan, String> {
    let command = tokens[0];
    let first_flag = if command == b"ms" { 3 } else { 2 };
    let flags = tokens.get(first_flag..).unwrap_or(&[]);
    let base64 = flags.iter().any(|f| *f == b"b");
    let key = if base64 {
        match base64_decode(tokens[1]) {
            Some(k) => k,
            // The server refuses it as it is.
            None => return Ok(Plan { to_server: frame.to_vec(), ..Plan::default() }),
        }
    } else {
        tokens[1].to_vec()
    };
    let mut effect = KeyEffect { key: key.clone(), ..Default::default() };
    let mut changes: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut dropped: Vec<usize> = Vec::new();
    let mut ttl_reply_key = None;
    let mut append_mode = false;
    for (i, flag) in flags.iter().enumerate() {
        let at = first_flag + i;
        let (letter, arg) = (flag[0], &flag[1..]);
        let exptime = || number(arg).ok_or_else(|| "a TTL that is not a number".to_string());
        match (command, letter) {
            (_, b'h' | b'l') => {
                return Err(format!(
                    "flag {} shows one server's access history or clock",
                    letter as char
                ))
            }
            (b"ms" | b"md", b'I') => {
                return Err("invalidation (stale items) is not replicated".into())
            }
            (b"md", b'T') => return Err("a TTL on delete is not replicated".into()),
            (b"mg" | b"ma" | b"ms", b'T') => {
                match command {
                    b"mg" => effect.on_hit = Some(exptime()?),
                    _ => effect.on_store = Some(exptime()?),
                }
                dropped.push(at);
            }
            (b"mg" | b"ma" | b"ms", b'N') => {
                effect.on_create = Some(exptime()?);
                changes.push((at, b"N0".to_vec()));
            }
            (b"mg" | b"ma", b't') => ttl_reply_key = Some(key.clone()),
            (b"ms", b'M') => append_mode = matches!(arg, b"A" | b"a" | b"P" | b"p"),
            _ => {}
        }
    }
    match command {
        // An ms that stores without T stores with no expiry, except in append mode (which keeps it).
        b"ms" if !append_mode => {
            effect.on_store.get_or_insert(0);
        }
        b"ms" => effect.on_store = None,
        b"md" => effect.may_remove = true,
        _ => {}
    }
    let mut to_server = rebuilt(tokens, &changes, &dropped);
    to_server.extend_from_slice(data(frame));
    Ok(Plan { to_server, keys: vec![effect], flush: false, ttl_reply_key })
}

/// The line of `tokens` with the tokens at `changes` replaced and those at `dropped` left out,
/// ended by `\r\n`.
fn rebuilt(tokens: &[&[u8]], changes: &[(usize, Vec<u8>)], dropped: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        if dropped.contains(&i) {
            continue;
        }
        if !out.is_empty() {
            out.push(b' ');
        }
        match changes.iter().find(|(at, _)| *at == i) {
            Some((_, new)) => out.extend_from_slice(new),
            None => out.extend_from_slice(token),
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_exptimes_become_zero() {
        let p = plan(b"set k 5 100 2 noreply\r\nab\r\n").unwrap();
        assert_eq!(p.to_server, b"set k 5 0 2 noreply\r\nab\r\n");
        assert_eq!(p.keys[0].on_store, Some(100));
        let p = plan(b"cas k 5 -1 2 77\r\nab\r\n").unwrap();
        assert_eq!(p.to_server, b"cas k 5 0 2 77\r\nab\r\n");
        assert_eq!(p.keys[0].on_store, Some(-1));
        // A malformed exptime goes to the server as it is, which refuses it.
        let p = plan(b"set k 5 soon 2\r\nab\r\n").unwrap();
        assert_eq!(p.to_server, b"set k 5 soon 2\r\nab\r\n");
        assert!(p.keys.is_empty());
        assert_eq!(plan(b"append k 0 9 1\r\nx\r\n").unwrap().to_server, b"append k 0 9 1\r\nx\r\n");
    }

    #[test]
    fn touches_note_their_expiry_per_key() {
        let p = plan(b"gat 30 a b\r\n").unwrap();
        assert_eq!(p.to_server, b"gat 0 a b\r\n");
        assert_eq!(p.keys.len(), 2);
        assert_eq!(p.keys[1].on_hit, Some(30));
        assert_eq!(plan(b"touch a 9 noreply\r\n").unwrap().to_server, b"touch a 0 noreply\r\n");
    }

    #[test]
    fn meta_ttls_are_taken_out() {
        let p = plan(b"ms Zm9v 2 T10 b c\r\nhi\r\n").unwrap();
        assert_eq!(p.to_server, b"ms Zm9v 2 b c\r\nhi\r\n");
        assert_eq!(p.keys[0].key, b"foo");
        assert_eq!(p.keys[0].on_store, Some(10));
        let p = plan(b"mg k v N30 T5 t\r\n").unwrap();
        assert_eq!(p.to_server, b"mg k v N0 t\r\n");
        assert_eq!((p.keys[0].on_create, p.keys[0].on_hit), (Some(30), Some(5)));
        assert_eq!(p.ttl_reply_key.as_deref(), Some(&b"k"[..]));
        let p = plan(b"ms k 1 MA\r\nx\r\n").unwrap();
        assert_eq!(p.keys[0].on_store, None);
    }

    #[test]
    fn what_cannot_be_replicated_is_refused() {
        assert!(matches!(kind(b"mg k h\r\n"), Kind::Refused(_)));
        assert!(matches!(kind(b"md k I T30\r\n"), Kind::Refused(_)));
        assert!(matches!(kind(b"flush_all 10\r\n"), Kind::Refused(_)));
        assert!(matches!(kind(b"shutdown\r\n"), Kind::Refused(_)));
        assert_eq!(kind(b"nonsense\r\n"), Kind::Refused("ERROR\r\n".into()));
        assert_eq!(kind(b"flush_all 0\r\n"), Kind::Replicated);
        assert_eq!(kind(b"flush_all noreply\r\n"), Kind::Replicated);
        assert_eq!(kind(b"get a b\r\n"), Kind::Replicated);
        assert_eq!(kind(b"stats\r\n"), Kind::Local);
    }
}
