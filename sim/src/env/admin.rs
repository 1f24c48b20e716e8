//! The admin channel in the simulated world: a server registers its handler at the socket's
//! path while its listening task lives (a crash or an exit drops the task, and the
//! registration with it); `warden resolve` beside it calls the handler directly, on the
//! command's executor, as a connection to the socket would.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use warden::env::{AdminChannel, AdminHandler, LocalBoxFuture};

#[derive(Default)]
pub struct SimAdmin {
    /// Per socket path: the registration's number and its server's handler.
    handlers: RefCell<BTreeMap<PathBuf, (u64, AdminHandler, usize)>>,
    registrations: Cell<u64>,
}

pub struct SimAdminHandle(pub Rc<SimAdmin>);

/// Removes a registration when its listening task is dropped (unless a later server took the
/// path since).
struct Registered {
    admin: Rc<SimAdmin>,
    path: PathBuf,
    number: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut handlers = self.admin.handlers.borrow_mut();
        if handlers.get(&self.path).is_some_and(|(number, _, _)| *number == self.number) {
            handlers.remove(&self.path);
        }
    }
}

impl AdminChannel for SimAdminHandle {
    fn serve(
        &self,
        path: &Path,
        request_bytes_max: usize,
        handler: AdminHandler,
    ) -> LocalBoxFuture<'static, std::io::Result<()>> {
        let number = self.0.registrations.get() + 1;
        self.0.registrations.set(number);
        self.0.handlers.borrow_mut().insert(path.to_path_buf(), (number, handler, request_bytes_max));
        let registered = Registered { admin: Rc::clone(&self.0), path: path.to_path_buf(), number };
        Box::pin(async move {
            let _registered = registered;
            std::future::pending::<()>().await;
            Ok(())
        })
    }

    fn ask(
        &self,
        path: &Path,
        request: Vec<u8>,
        _timeout_ms: u64,
    ) -> LocalBoxFuture<'static, std::io::Result<Vec<u8>>> {
        let found = self.0.handlers.borrow().get(path).map(|(_, handler, max)| (Rc::clone(handler), *max));
        Box::pin(async move {
            match found {
                None => Err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "no server listens there")),
                Some((_, max)) if request.len() > max => Ok(br#"{"error": "the request is over the limit"}"#.to_vec()),
                Some((handler, _)) => Ok(handler(request).await),
            }
        })
    }
}
