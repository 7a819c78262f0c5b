//! Tabs: list, open, close, activate. Tab indexes follow the order described in
//! [`super::connection`].

use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::target::{ActivateTargetParams, CloseTargetParams};

use super::BrowserService;
use super::connection::{Session, Tab};
use super::dialog::OpenDialog;
use super::error::BrowserError;
use super::navigation::{PageState, WaitUntil};

/// A tab as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct TabInfo {
    pub index: usize,
    pub url: String,
    pub title: String,
    pub active: bool,
    /// The JavaScript dialog open in the tab (only tabs API calls used are watched).
    pub dialog: Option<OpenDialog>,
}

impl TabInfo {
    fn of(session: &Session, tab: &Tab) -> Self {
        Self {
            index: tab.index,
            url: tab.url.clone(),
            title: tab.title.clone(),
            active: tab.active,
            dialog: session.dialogs.open(&tab.target_id),
        }
    }
}

impl BrowserService {
    pub async fn tabs(&self) -> Result<Vec<TabInfo>, BrowserError> {
        self.bounded_session("listing tabs", |session| async move {
            Ok(session
                .tabs()
                .await?
                .iter()
                .map(|t| TabInfo::of(&session, t))
                .collect())
        })
        .await
    }

    /// Opens a tab (blank, or at `url` after the URL policy allowed it, waiting for `load`) and
    /// makes it the active one.
    pub async fn new_tab(
        &self,
        url: Option<&str>,
        limit: Duration,
    ) -> Result<TabInfo, BrowserError> {
        if let Some(url) = url {
            self.policy.check(url).await?;
        }
        let target = self
            .bounded_session("opening a tab", |session| async move {
                let target = session.open_tab().await?;
                session.page(&target).await?;
                session.set_active(&target);
                Ok(target)
            })
            .await?;
        let state = match url {
            Some(url) => Some(self.navigate(url, WaitUntil::Load, limit).await?),
            None => None,
        };
        let tabs = self.tabs().await?;
        let mut info = tabs.into_iter().find(|t| t.active).ok_or_else(|| {
            BrowserError::TabGone(format!("the new tab {} closed", target.as_ref()))
        })?;
        if let Some(PageState { url, title, .. }) = state {
            info.url = url;
            info.title = title;
        }
        Ok(info)
    }

    /// Reads `url` as Markdown in a tab of its own: opens it (after the URL policy allowed it,
    /// waiting for `load` within `limit`), converts it as [`Self::markdown`] does, closes it
    /// and makes the tab that was active before active again. A page the agent drives is left
    /// where it was (unless it acts on tabs at the same moment).
    pub async fn markdown_of(
        &self,
        url: &str,
        limit: Duration,
    ) -> Result<super::content::Markdown, BrowserError> {
        self.policy.check(url).await?;
        let before = self.tabs().await?;
        let active_before = before.iter().find(|t| t.active).map(|t| t.index);
        let read = match self.new_tab(Some(url), limit).await {
            Ok(_) => self.markdown().await,
            Err(error) => Err(error),
        };
        // Close the tab that was opened, whether the page loaded or not: it is the last one.
        match self.tabs().await {
            Ok(now) if now.len() > before.len() => {
                if let Some(opened) = now.last()
                    && let Err(error) = self.close_tab(opened.index).await
                {
                    tracing::warn!(%error, "cannot close the tab opened for Markdown");
                }
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cannot list tabs after reading Markdown"),
        }
        if let Some(index) = active_before
            && let Err(error) = self.activate_tab(index).await
        {
            tracing::warn!(%error, index, "cannot make the earlier tab active again");
        }
        read
    }

    /// Closes the tab at `index`. The last tab is replaced by a blank one first (closing
    /// Chromium's last tab would close its window and end the browser).
    pub async fn close_tab(&self, index: usize) -> Result<Vec<TabInfo>, BrowserError> {
        self.bounded_session("closing the tab", |session| async move {
            let tabs = session.tabs().await?;
            let tab = tabs.get(index).ok_or(BrowserError::NoTab {
                index,
                count: tabs.len(),
            })?;
            if tabs.len() == 1 {
                let blank = session.open_tab().await?;
                session.set_active(&blank);
            } else if tab.active {
                session.forget_active();
            }
            session
                .browser
                .execute(CloseTargetParams::new(tab.target_id.clone()))
                .await?;
            // The target disappears from the list asynchronously.
            for _ in 0..50 {
                let now = session.tabs().await?;
                if !now.iter().any(|t| t.target_id == tab.target_id) {
                    return Ok(now.iter().map(|t| TabInfo::of(&session, t)).collect());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(session
                .tabs()
                .await?
                .iter()
                .map(|t| TabInfo::of(&session, t))
                .collect())
        })
        .await
    }

    /// Makes the tab at `index` the active one and brings it to the front.
    pub async fn activate_tab(&self, index: usize) -> Result<TabInfo, BrowserError> {
        self.bounded_session("activating the tab", |session| async move {
            let tabs = session.tabs().await?;
            let tab = tabs.get(index).ok_or(BrowserError::NoTab {
                index,
                count: tabs.len(),
            })?;
            session
                .browser
                .execute(ActivateTargetParams::new(tab.target_id.clone()))
                .await?;
            session.set_active(&tab.target_id);
            let mut info = TabInfo::of(&session, tab);
            info.active = true;
            Ok(info)
        })
        .await
    }
}
