//! The application a cluster replicates (`app` in its TOML): the key-value store (`"kv"`, the
//! default) or the order book (`"orderbook"`, `docs/apps/orderbook.md`). Both take requests as
//! bytes that name a client and a sequence number, apply each (client, sequence number) once,
//! and keep the last reply of each client: the service treats them alike and only this file
//! tells them apart.

use crate::wire::{ClientMessage, ServerMessage};
use mu_kv::Store;
use mu_orderbook::Engine;

/// Which application a cluster runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum App {
    #[default]
    Kv,
    Orderbook,
}

impl App {
    /// The application named `name` in a cluster file.
    pub fn parse(name: &str) -> Result<App, String> {
        match name {
            "kv" => Ok(App::Kv),
            "orderbook" => Ok(App::Orderbook),
            other => Err(format!(
                "app \"{other}\": use \"kv\" (the key-value store) or \"orderbook\" (the order \
                 matching engine)"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            App::Kv => "kv",
            App::Orderbook => "orderbook",
        }
    }

    /// The request a client message carries, decoded, with its bytes; an error (the refusal's
    /// text) for a request of the other application or malformed bytes.
    pub fn request(self, message: ClientMessage) -> Result<(AppRequest, Vec<u8>), String> {
        match (self, message) {
            (App::Kv, ClientMessage::Kv(bytes)) => mu_kv::Request::decode(&bytes)
                .map(|r| (AppRequest::Kv(r), bytes))
                .map_err(|e| format!("malformed request: {e}")),
            (App::Orderbook, ClientMessage::Order(bytes)) => mu_orderbook::Request::decode(&bytes)
                .map(|r| (AppRequest::Order(r), bytes))
                .map_err(|e| format!("malformed order book request: {e}")),
            (App::Kv, ClientMessage::Order(_)) => {
                Err("this cluster runs the key-value store (app = \"kv\"), not the order book"
                    .into())
            }
            (App::Orderbook, ClientMessage::Kv(_)) => Err(
                "this cluster runs the order book (app = \"orderbook\"), not the key-value store"
                    .into(),
            ),
            (_, other) => Err(format!("not a request: {other:?}")),
        }
    }
}

/// A client's request, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppRequest {
    Kv(mu_kv::Request),
    Order(mu_orderbook::Request),
}

impl AppRequest {
    pub fn client(&self) -> u64 {
        match self {
            AppRequest::Kv(r) => r.client,
            AppRequest::Order(r) => r.client,
        }
    }

    pub fn seq(&self) -> u64 {
        match self {
            AppRequest::Kv(r) => r.seq,
            AppRequest::Order(r) => r.seq,
        }
    }

    /// The key-value request, if it is one.
    pub fn kv(&self) -> Option<&mu_kv::Request> {
        match self {
            AppRequest::Kv(r) => Some(r),
            AppRequest::Order(_) => None,
        }
    }
}

/// What applying a request answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppReply {
    Kv(mu_kv::Reply),
    Order(mu_orderbook::Reply),
}

impl AppReply {
    /// The answer a client gets.
    pub fn into_message(self) -> ServerMessage {
        match self {
            AppReply::Kv(r) => ServerMessage::Reply(r),
            AppReply::Order(r) => ServerMessage::Events(r),
        }
    }
}

/// The replicated state: one application's.
#[derive(Clone, Debug)]
pub enum AppState {
    Kv(Store),
    Orderbook(Engine),
}

impl Default for AppState {
    fn default() -> AppState {
        AppState::new(App::Kv)
    }
}

impl AppState {
    pub fn new(app: App) -> AppState {
        match app {
            App::Kv => AppState::Kv(Store::new()),
            App::Orderbook => AppState::Orderbook(Engine::new()),
        }
    }

    pub fn app(&self) -> App {
        match self {
            AppState::Kv(_) => App::Kv,
            AppState::Orderbook(_) => App::Orderbook,
        }
    }

    /// Applies a log entry's request: `None` for bytes that are not a request of this
    /// application (malformed at every replica alike: nothing changes anywhere).
    pub fn apply(&mut self, bytes: &[u8]) -> Option<(u64, u64, AppReply)> {
        match self {
            AppState::Kv(store) => {
                let r = mu_kv::Request::decode(bytes).ok()?;
                Some((r.client, r.seq, AppReply::Kv(store.apply(&r))))
            }
            AppState::Orderbook(engine) => {
                let r = mu_orderbook::Request::decode(bytes).ok()?;
                Some((r.client, r.seq, AppReply::Order(engine.apply(&r))))
            }
        }
    }

    /// The reply of `client`'s request `seq`, if it is the last one that client applied.
    pub fn session_reply(&self, client: u64, seq: u64) -> Option<AppReply> {
        match self {
            AppState::Kv(store) => store.reply(client, seq).cloned().map(AppReply::Kv),
            AppState::Orderbook(engine) => engine.reply(client, seq).cloned().map(AppReply::Order),
        }
    }

    /// The key-value store, if that is the application.
    pub fn kv(&self) -> Option<&Store> {
        match self {
            AppState::Kv(store) => Some(store),
            AppState::Orderbook(_) => None,
        }
    }

    /// Equal at replicas that applied the same requests.
    pub fn digest(&self) -> u64 {
        match self {
            AppState::Kv(store) => store.digest(),
            AppState::Orderbook(engine) => engine.digest(),
        }
    }

    /// How much state there is: keys, or orders resting in the book.
    pub fn items_count(&self) -> u64 {
        match self {
            AppState::Kv(store) => store.keys_count() as u64,
            AppState::Orderbook(engine) => engine.book().orders_open() as u64,
        }
    }

    pub fn snapshot(&self, out: &mut Vec<u8>) {
        match self {
            AppState::Kv(store) => store.snapshot(out),
            AppState::Orderbook(engine) => engine.snapshot(out),
        }
    }

    pub fn restore(app: App, bytes: &[u8]) -> Result<AppState, String> {
        match app {
            App::Kv => Store::restore(bytes)
                .map(AppState::Kv)
                .map_err(|e| format!("key-value snapshot: {e}")),
            App::Orderbook => Engine::restore(bytes)
                .map(AppState::Orderbook)
                .map_err(|e| format!("order book snapshot: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for app in [App::Kv, App::Orderbook] {
            assert_eq!(App::parse(app.name()), Ok(app));
        }
        let e = App::parse("redis").unwrap_err();
        assert!(e.contains("\"kv\"") && e.contains("\"orderbook\""), "{e}");
    }

    #[test]
    fn a_request_of_the_other_application_is_refused() {
        let e = App::Kv.request(ClientMessage::Order(vec![1])).unwrap_err();
        assert!(e.contains("key-value store"), "{e}");
        let e = App::Orderbook.request(ClientMessage::Kv(vec![1])).unwrap_err();
        assert!(e.contains("order book"), "{e}");
        assert!(App::Orderbook.request(ClientMessage::Order(vec![1, 2, 3])).is_err());
    }
}
