//! [`ClientBuilder`]: where the server is, and how the client behaves.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use super::transport::{self, Transport};
use super::{Client, ClientConfig, ClientError, Inner, InputHandler, TaskJournal};
use crate::model::{ClientCapabilities, JsonObject, TasksCapability};

/// Builds a [`Client`].
pub struct ClientBuilder {
    target: Target,
    token: Option<String>,
    config: ClientConfig,
    input: Option<Arc<dyn InputHandler>>,
    journal: Option<TaskJournal>,
}

enum Target {
    Http(String),
    Stdio(tokio::process::Command),
    #[cfg(feature = "fuzzing")]
    Scripted(transport::scripted::Responder),
}

impl ClientBuilder {
    /// A client of the Streamable HTTP endpoint at `url`
    /// (e.g. [`DEFAULT_URL`](super::DEFAULT_URL)).
    pub fn http(url: impl Into<String>) -> Self {
        Self::with_target(Target::Http(url.into()))
    }

    /// A client of a server started as a child process speaking MCP on its
    /// stdin/stdout (e.g. `subtask serve --stdio`). stdin and stdout are
    /// taken over; stderr is left as the command sets it. The process is
    /// killed when the last clone of the client is dropped.
    pub fn stdio(command: tokio::process::Command) -> Self {
        Self::with_target(Target::Stdio(command))
    }

    /// A client whose requests `responder` answers in process, decoded as
    /// HTTP answers: for the fuzz harness only (`subtask::fuzzing`).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn scripted(responder: transport::scripted::Responder) -> Self {
        Self::with_target(Target::Scripted(responder))
    }

    fn with_target(target: Target) -> Self {
        ClientBuilder {
            target,
            token: None,
            config: ClientConfig::default(),
            input: None,
            journal: None,
        }
    }

    /// Sends `Authorization: Bearer TOKEN` (HTTP only).
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Replaces the configuration.
    #[must_use]
    pub fn config(mut self, config: ClientConfig) -> Self {
        self.config = config;
        self
    }

    /// Answers input requests (and declares the `elicitation` capability).
    #[must_use]
    pub fn input_handler(mut self, handler: impl InputHandler) -> Self {
        self.input = Some(Arc::new(handler));
        self
    }

    /// Records every task this client creates, and when it finishes, so
    /// that a later process can resume the unfinished ones.
    #[must_use]
    pub fn journal(mut self, journal: TaskJournal) -> Self {
        self.journal = Some(journal);
        self
    }

    /// The client. For stdio, starts the process (inside a tokio runtime).
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`]: a malformed or `https` URL, a bad token, a
    /// process that cannot be started.
    pub fn build(self) -> Result<Client, ClientError> {
        let transport = match self.target {
            Target::Http(url) => Transport::Http(transport::http::HttpTransport::new(
                &url,
                self.token,
                &self.config,
            )?),
            Target::Stdio(command) => {
                Transport::Stdio(transport::stdio::StdioTransport::spawn(command, &self.config)?)
            }
            #[cfg(feature = "fuzzing")]
            Target::Scripted(responder) => Transport::Scripted(transport::scripted::ScriptedTransport::new(
                responder,
                &self.config,
            )),
        };
        let mut capabilities = ClientCapabilities::with_tasks(TasksCapability::FULL);
        if self.input.is_some() {
            capabilities.elicitation = Some(JsonObject::new());
        }
        Ok(Client {
            inner: Arc::new(Inner {
                transport,
                config: self.config,
                input: self.input,
                journal: self.journal,
                capabilities,
                next_id: AtomicI64::new(1),
            }),
        })
    }
}
