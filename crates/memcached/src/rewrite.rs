//! What the front does with each command (`docs/apps/memcached.md`, "Command coverage"), and
//! how a replicated command is rewritten for the server: every exptime becomes 0 (the servers
//! never expire anything themselves) and the expiry it asked for is noted, per key, for the
//! state machine's table.

use crate::text::{base64_decode, check_line, data, int32, line, refusal, tokens};

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
    let refuse = |why: &str| Kind::Refused(refusal(command, why));
    match command {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" | b"get" | b"gets"
        | b"gat" | b"gats" | b"touch" | b"incr" | b"decr" | b"delete" | b"flush_all" | b"mg"
        | b"ms" | b"md" | b"ma" => match plan(frame) {
            Err(why) => refuse(&why),
            Ok(_) => Kind::Replicated,
        },
        b"stats" if tokens.get(1) == Some(&&b"expiries"[..]) => Kind::Expiries,
        b"version" | b"stats" | b"verbosity" => match check_line(line(frame), &tokens) {
            Err(why) => refuse(&why),
            Ok(()) => Kind::Local,
        },
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
    /// The key (as the server knows it) to which the command may give a new CAS, if any: a
    /// store, an append, an increment, an autovivify. Memcached numbers CAS values from one
    /// counter; the state machine follows that counter by looking this key up after the
    /// command (`docs/apps/memcached.md`, "State transfer").
    pub renews: Option<Vec<u8>>,
}

/// The plan of a replicated request, or why it is refused. The request's line is checked
/// first ([`check_line`]): what reaches a server is only what the front reads exactly as
/// memcached does, sent as canonical tokens (one space between them).
pub fn plan(frame: &[u8]) -> Result<Plan, String> {
    let text = line(frame);
    let tokens = tokens(text);
    check_line(text, &tokens)?;
    let command = tokens.first().copied().unwrap_or_default();
    let mut plan = planned(frame, &tokens, command)?;
    if plan.renews.is_none() && renews_its_key(command) {
        plan.renews = tokens.get(1).map(|k| k.to_vec());
    }
    Ok(plan)
}

/// Whether a classic command gives its key a new CAS when it succeeds.
fn renews_its_key(command: &[u8]) -> bool {
    matches!(
        command,
        b"set" | b"add" | b"replace" | b"cas" | b"append" | b"prepend" | b"incr" | b"decr"
    )
}

/// The plan of a request whose line was checked (`tokens`, `command` the first).
fn planned(frame: &[u8], tokens: &[&[u8]], command: &[u8]) -> Result<Plan, String> {
    let unchanged = |keys: Vec<KeyEffect>| {
        let mut to_server = rebuilt(tokens, &[], &[]);
        to_server.extend_from_slice(data(frame));
        Plan { to_server, keys, ..Plan::default() }
    };
    let exptime = |token: &[u8]| int32(token).map(i64::from).ok_or("an exptime".to_string());
    match command {
        b"set" | b"add" | b"replace" | b"cas" => {
            let mut to_server = rebuilt(tokens, &[(3, b"0".to_vec())], &[]);
            to_server.extend_from_slice(data(frame));
            let on_store = Some(exptime(tokens[3])?);
            let key = KeyEffect { key: tokens[1].to_vec(), on_store, ..Default::default() };
            Ok(Plan { to_server, keys: vec![key], ..Plan::default() })
        }
        b"touch" => Ok(Plan {
            to_server: rebuilt(tokens, &[(2, b"0".to_vec())], &[]),
            keys: vec![KeyEffect {
                key: tokens[1].to_vec(),
                on_hit: Some(exptime(tokens[2])?),
                ..Default::default()
            }],
            ..Plan::default()
        }),
        b"gat" | b"gats" => {
            let on_hit = Some(exptime(tokens[1])?);
            Ok(Plan {
                to_server: rebuilt(tokens, &[(1, b"0".to_vec())], &[]),
                keys: tokens[2..]
                    .iter()
                    .map(|k| KeyEffect { key: k.to_vec(), on_hit, ..Default::default() })
                    .collect(),
                ..Plan::default()
            })
        }
        b"delete" => Ok(unchanged(vec![KeyEffect {
            key: tokens[1].to_vec(),
            may_remove: true,
            ..Default::default()
        }])),
        b"flush_all" => Ok(Plan { flush: true, ..unchanged(vec![]) }),
        b"mg" | b"ms" | b"md" | b"ma" => meta(frame, tokens),
        _ => Ok(unchanged(vec![])),
    }
}

/// Meta commands: `mg|md|ma <key> <flags>*`, `ms <key> <datalen> <flags>*`. TTL flags (`T`)
/// are taken out, autovivify TTLs (`N`) become `N0`; flags that would show or use a server's
/// own clock or its own access history are refused.
fn meta(frame: &[u8], tokens: &[&[u8]]) -> Result<Plan, String> {
    let command = tokens[0];
    let first_flag = if command == b"ms" { 3 } else { 2 };
    let flags = tokens.get(first_flag..).unwrap_or(&[]);
    let base64 = flags.iter().any(|f| f[0] == b'b');
    let key = if base64 {
        base64_decode(tokens[1]).ok_or("a base64 key that does not decode")?
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
        let exptime =
            || int32(arg).map(i64::from).ok_or_else(|| "a TTL that is not a number".to_string());
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
            // Memcached 1.6 parses `N` on `ms` but never creates an item with it.
            (b"mg" | b"ma", b'N') => {
                effect.on_create = Some(exptime()?);
                changes.push((at, b"N0".to_vec()));
            }
            (b"ms", b'N') => changes.push((at, b"N0".to_vec())),
            (b"mg" | b"ma", b't') => ttl_reply_key = Some(key.clone()),
            (b"ms", b'M') => append_mode = matches!(arg, b"A" | b"P"),
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
    // A store, an arithmetic, or an autovivify: each may number the item anew.
    let renews =
        (command == b"ms" || command == b"ma" || effect.on_create.is_some()).then(|| key.clone());
    let mut to_server = rebuilt(tokens, &changes, &dropped);
    to_server.extend_from_slice(data(frame));
    Ok(Plan { to_server, keys: vec![effect], flush: false, ttl_reply_key, renews })
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
        assert_eq!(plan(b"append k 0 9 1\r\nx\r\n").unwrap().to_server, b"append k 0 9 1\r\nx\r\n");
        // Tokens reach the server canonical: one space between them.
        assert_eq!(plan(b"  get  a   b\r\n").unwrap().to_server, b"get a b\r\n");
    }

    /// The key a command may number anew: every store, append, arithmetic and autovivify;
    /// no read, touch or delete.
    #[test]
    fn commands_that_may_renew_a_cas_name_their_key() {
        let renews = |frame: &[u8]| plan(frame).unwrap().renews;
        let k = Some(b"k".to_vec());
        for frame in [
            &b"set k 0 0 1\r\nx\r\n"[..],
            b"cas k 0 0 1 5\r\nx\r\n",
            b"append k 0 0 1\r\nx\r\n",
            b"incr k 1\r\n",
            b"decr k 1 noreply\r\n",
            b"ms k 1 T5\r\nx\r\n",
            b"ma k\r\n",
            b"mg k N30 v\r\n",
        ] {
            assert_eq!(renews(frame), k, "{:?}", String::from_utf8_lossy(frame));
        }
        assert_eq!(renews(b"ms YQ== 1 b\r\nx\r\n"), Some(b"a".to_vec()), "as the server knows it");
        for frame in [
            &b"get k\r\n"[..],
            b"gets k j\r\n",
            b"touch k 5\r\n",
            b"gat 5 k\r\n",
            b"mg k v c\r\n",
            b"delete k\r\n",
            b"md k\r\n",
            b"flush_all\r\n",
        ] {
            assert_eq!(renews(frame), None, "{:?}", String::from_utf8_lossy(frame));
        }
    }

    /// Findings 1 and 2: nothing the front might read otherwise than memcached is forwarded
    /// "as is" (memcached would keep the client's exptime, by its own clock).
    #[test]
    fn malformed_requests_are_refused_not_forwarded() {
        for frame in [
            &b"set k 5 soon 2\r\nab\r\n"[..],
            b"set z 0 10\t 1\r\nx\r\n",
            b"touch k 10\t\r\n",
            b"touch k soon\r\n",
            b"gat 10\t k\r\n",
            b"gats x k\r\n",
            b"mg k T10\t\r\n",
            b"ma k N1x\r\n",
        ] {
            assert!(plan(frame).is_err(), "{:?}", String::from_utf8_lossy(frame));
            assert!(matches!(kind(frame), Kind::Refused(r) if r.starts_with("CLIENT_ERROR")));
        }
    }

    /// Finding 3: memcached decodes a base64 key skipping what is not base64; the front
    /// refuses it rather than forward the request with its TTL.
    #[test]
    fn base64_keys_that_do_not_decode_are_refused() {
        assert!(plan(b"ms Zm9v! 1 b T30\r\nx\r\n").is_err());
        assert!(plan(b"mg Zm9 b T30\r\n").is_err());
        assert!(plan(b"mg Zm9v bx\r\n").is_err());
        assert_eq!(plan(b"mg Zm9v b T30\r\n").unwrap().keys[0].key, b"foo");
    }

    /// Finding 5: a `flush_all` memcached refuses must not empty the table.
    #[test]
    fn only_flushes_memcached_runs_at_once_are_replicated() {
        for frame in [
            &b"flush_all\r\n"[..],
            b"flush_all noreply\r\n",
            b"flush_all 0\r\n",
            b"flush_all 0 noreply\r\n",
        ] {
            assert!(plan(frame).unwrap().flush, "{:?}", String::from_utf8_lossy(frame));
        }
        for frame in [
            &b"flush_all abc\r\n"[..],
            b"flush_all noreply 5\r\n",
            b"flush_all 5\r\n",
            b"flush_all -1\r\n",
            b"flush_all 0 6\r\n",
        ] {
            assert!(plan(frame).is_err(), "{:?}", String::from_utf8_lossy(frame));
            assert!(matches!(kind(frame), Kind::Refused(_)));
        }
    }

    /// Finding 8: memcached 1.6 never creates an item with `ms`'s `N`: no expiry on create.
    #[test]
    fn ms_ignores_autovivify() {
        let p = plan(b"ms k 1 N30\r\nx\r\n").unwrap();
        assert_eq!(p.to_server, b"ms k 1 N0\r\nx\r\n");
        assert_eq!((p.keys[0].on_create, p.keys[0].on_store), (None, Some(0)));
        assert_eq!(plan(b"ms k 1 MA N30\r\nx\r\n").unwrap().keys[0].on_create, None);
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
