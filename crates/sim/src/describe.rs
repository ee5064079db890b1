//! Requests as text, for traces and reports.

use mu_kv::{Op, Request};

/// A request as text for traces and reports: key-value requests decoded, other bytes as
/// (lossy) text.
pub fn describe_request(bytes: &[u8]) -> String {
    match Request::decode(bytes) {
        Ok(r) => {
            let t = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            let what = match &r.op {
                Op::Get { key } => format!("get {}", t(key)),
                Op::Put { key, value } => format!("put {}={}", t(key), t(value)),
                Op::Delete { key } => format!("delete {}", t(key)),
                Op::Cas { key, expected, value } => format!(
                    "cas {} {}->{}",
                    t(key),
                    expected.as_deref().map_or("absent".into(), t),
                    t(value)
                ),
            };
            format!("c{}#{} {what}", r.client, r.seq)
        }
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}
