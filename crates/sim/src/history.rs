//! Client histories in the `mu-kv-history` JSON format that `lincheck` checks
//! (docs/verification/linearizability.md): what each client invoked, when, and what it was told.

use mu_kv::{Op, Reply};
use serde_json::{json, Value};

/// How an operation ended, as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The client got `reply` at `at_ns`.
    Returned { at_ns: u64, reply: Reply },
    /// The client does not know whether the operation took effect (its proposal aborted, or the
    /// replica it asked crashed): it may have, at any time after its invocation.
    Unknown,
}

/// One operation of one client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    pub client: u64,
    pub op: Op,
    pub invoke_ns: u64,
    pub outcome: Outcome,
}

/// A whole client history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// Free text saying what produced it (seed, configuration).
    pub source: String,
    pub operations: Vec<Operation>,
}

impl History {
    pub fn returned_count(&self) -> usize {
        self.operations.iter().filter(|o| matches!(o.outcome, Outcome::Returned { .. })).count()
    }

    pub fn unknown_count(&self) -> usize {
        self.operations.len() - self.returned_count()
    }

    /// The history as JSON. Keys and values are written as text when every one of them is
    /// UTF-8, and all as hex otherwise (one encoding throughout, as the format asks).
    ///
    /// # Errors
    ///
    /// A reply that does not fit its operation (a get answered "stored", a malformed or stale
    /// reply): the client was told something a key-value store cannot say, which is a bug worth
    /// reporting rather than a history to check.
    pub fn to_json(&self) -> Result<String, String> {
        let texts = self.operations.iter().all(|o| {
            let (key, values) = parts(&o.op);
            std::iter::once(key).chain(values).all(|b| std::str::from_utf8(b).is_ok())
        });
        let enc = |b: &[u8]| -> Value {
            if texts {
                Value::String(String::from_utf8(b.to_vec()).expect("checked UTF-8"))
            } else {
                Value::String(b.iter().map(|x| format!("{x:02x}")).collect())
            }
        };
        let mut ops = Vec::with_capacity(self.operations.len());
        for (i, o) in self.operations.iter().enumerate() {
            let mut v =
                json!({"client": o.client, "key": enc(o.op.key()), "invoke_ns": o.invoke_ns});
            let m = v.as_object_mut().expect("an object");
            m.insert("op".into(), json!(op_name(&o.op)));
            match &o.op {
                Op::Put { value, .. } => {
                    m.insert("value".into(), enc(value));
                }
                Op::Cas { expected, value, .. } => {
                    m.insert("expected".into(), expected.as_deref().map_or(Value::Null, enc));
                    m.insert("value".into(), enc(value));
                }
                Op::Get { .. } | Op::Delete { .. } => {}
            }
            match &o.outcome {
                Outcome::Unknown => {
                    m.insert("return_ns".into(), Value::Null);
                }
                Outcome::Returned { at_ns, reply } => {
                    m.insert("return_ns".into(), json!(at_ns));
                    let result = match (&o.op, reply) {
                        (Op::Get { .. }, Reply::Value(v)) => v.as_deref().map_or(Value::Null, enc),
                        (Op::Put { .. }, Reply::Stored) => Value::Null,
                        (Op::Delete { .. }, Reply::Deleted(b)) => json!(b),
                        (Op::Cas { .. }, Reply::Swapped(b)) => json!(b),
                        (op, reply) => {
                            return Err(format!(
                                "operation {i} (client {}): {} answered {reply:?}",
                                o.client,
                                op_name(op)
                            ))
                        }
                    };
                    m.insert("result".into(), result);
                }
            }
            ops.push(v);
        }
        let doc = json!({
            "format": "mu-kv-history",
            "version": 1,
            "source": self.source,
            "operations": ops,
        });
        Ok(serde_json::to_string(&doc).expect("JSON of plain values"))
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Get { .. } => "get",
        Op::Put { .. } => "put",
        Op::Delete { .. } => "delete",
        Op::Cas { .. } => "cas",
    }
}

fn parts(op: &Op) -> (&[u8], Vec<&[u8]>) {
    match op {
        Op::Get { key } | Op::Delete { key } => (key, vec![]),
        Op::Put { key, value } => (key, vec![value]),
        Op::Cas { key, expected, value } => {
            (key, expected.iter().map(Vec::as_slice).chain([value.as_slice()]).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_field_the_format_asks_for() {
        let h = History {
            source: "test".into(),
            operations: vec![
                Operation {
                    client: 0,
                    op: Op::Cas { key: b"k".to_vec(), expected: None, value: b"v".to_vec() },
                    invoke_ns: 5,
                    outcome: Outcome::Returned { at_ns: 9, reply: Reply::Swapped(true) },
                },
                Operation {
                    client: 1,
                    op: Op::Get { key: b"k".to_vec() },
                    invoke_ns: 6,
                    outcome: Outcome::Unknown,
                },
            ],
        };
        let v: Value = serde_json::from_str(&h.to_json().unwrap()).unwrap();
        assert_eq!(v["format"], "mu-kv-history");
        assert_eq!(v["operations"][0]["expected"], Value::Null);
        assert_eq!(v["operations"][0]["result"], true);
        assert_eq!(v["operations"][1]["return_ns"], Value::Null);
        assert!(v["operations"][1].get("result").is_none());
        let mut bad = h.clone();
        bad.operations[0].outcome = Outcome::Returned { at_ns: 9, reply: Reply::Stored };
        assert!(bad.to_json().unwrap_err().contains("cas answered Stored"));
    }
}
