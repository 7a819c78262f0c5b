//! Two orchestrator replicas on one Postgres, one Docker Engine and one installation (issue 25,
//! item 2), with the real sandbox image: the warm pool is made by one of them and claimed
//! through both; creates and deletes spread over both at once each happen exactly once (a
//! sandbox created through one is deleted through the other); a replica killed in the middle
//! of creates leaves nothing behind once its peer sees it gone; and the database and the
//! engine agree at every end.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, ensure};
use orchestrator::db::{SandboxFilter, Store};
use serde_json::json;

use crate::common::{ADMIN_KEY, Options, Orchestrator};
use agentbox_tests::postgres::Postgres;

/// Clients creating and deleting at once, spread over the two replicas (within the admin
/// key's default quota of 20).
const CLIENTS: usize = 16;

/// Rows of the installation (pool members included) and its containers.
async fn rows_and_containers(
    store: &Store,
    orchestrator: &Orchestrator,
) -> anyhow::Result<(HashSet<String>, usize)> {
    let rows = store
        .list_sandboxes(&SandboxFilter {
            include_pooled: true,
            instance: Some(orchestrator.instance.clone()),
            ..Default::default()
        })
        .await?;
    Ok((
        rows.into_iter().map(|r| r.id).collect(),
        orchestrator.containers().len(),
    ))
}

/// Waits until every row has its container and every container its row.
async fn wait_agreed(store: &Store, orchestrator: &Orchestrator, why: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (rows, containers) = rows_and_containers(store, orchestrator).await?;
        let creating = store
            .list_sandboxes(&SandboxFilter {
                include_pooled: true,
                instance: Some(orchestrator.instance.clone()),
                status: Some(orchestrator::db::SandboxStatus::Creating),
                ..Default::default()
            })
            .await?
            .len();
        if rows.len() == containers && creating == 0 {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{why}: {} rows ({creating} creating), {containers} containers after 120 s\n{}",
            rows.len(),
            orchestrator.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn two_replicas_share_the_pool_and_every_create_and_delete_happens_once() -> anyhow::Result<()>
{
    let postgres = Postgres::start()?;
    postgres.wait_accepting().await?;
    let store = Store::connect(&postgres.url()).await?;
    let mut a = Orchestrator::start(Options {
        database_url: Some(postgres.url()),
        replica: Some("rep-a".into()),
        pool_size: 2,
        ..Options::default()
    })?;
    let b = Orchestrator::start(Options {
        database_url: Some(postgres.url()),
        replica: Some("rep-b".into()),
        pool_size: 2,
        replica_of: Some(a.peer()),
        ..Options::default()
    })?;

    // The pool: made once (two members, not four), by the duty's holder.
    a.wait_for("a full pool", Duration::from_secs(180), async || {
        store
            .pool_members(&a.instance)
            .await
            .is_ok_and(|m| m.len() == 2)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let holder = store
        .lease_holder("pool_refill", orchestrator::secret::now_ms())
        .await?
        .context("someone refills")?;
    ensure!(["rep-a", "rep-b"].contains(&holder.as_str()), "{holder}");
    wait_agreed(&store, &a, "the pool").await?;
    assert_eq!(a.containers().len(), 2, "two members, made by one replica");
    let members: HashSet<String> = store
        .pool_members(&a.instance)
        .await?
        .into_iter()
        .map(|m| m.id)
        .collect();

    // A claim through the replica that did not refill is served from the pool.
    let follower = if holder == "rep-a" { &b } else { &a };
    let claimed = follower.create(json!({})).await?;
    let claimed_id = claimed["id"].as_str().context("id")?.to_string();
    ensure!(
        members.contains(&claimed_id),
        "{claimed_id} is not one of the pool's {members:?}"
    );
    assert_eq!(follower.delete(&claimed_id).await?, 204);

    // Creates and deletes at once over both replicas: each create is one sandbox, each
    // delete (through the other replica) removes it.
    let replicas = [&a, &b];
    let clients = (0..CLIENTS).map(|i| {
        let creator = replicas[i % 2];
        let deleter = replicas[(i + 1) % 2];
        async move {
            // Half of them cannot be served from the pool (a variable of their own).
            let body = if i % 4 < 2 {
                json!({})
            } else {
                json!({"env": {"CLIENT": i.to_string()}})
            };
            let created = creator.create(body).await?;
            let id = created["id"].as_str().context("id")?.to_string();
            let status = deleter.delete(&id).await?;
            ensure!(status == 204, "delete of {id} answered {status}");
            Ok::<_, anyhow::Error>(id)
        }
    });
    let ids: Vec<String> = futures_util::future::try_join_all(clients).await?;
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        CLIENTS,
        "every create got a sandbox of its own"
    );
    for id in &ids {
        let (status, _) = a.get(&format!("/v1/sandboxes/{id}")).await?;
        assert_eq!(status, 404, "{id} deleted");
    }
    wait_agreed(&store, &a, "after the creates and deletes").await?;

    // A replica killed while creating: its peer undoes what it left once it sees it gone,
    // and takes its duties over before the sandboxes' dead-man switch (three heartbeats)
    // ends the pool members it was keeping alive.
    a.wait_for("a full pool again", Duration::from_secs(180), async || {
        store
            .pool_members(&a.instance)
            .await
            .is_ok_and(|m| m.len() == 2)
    })
    .await?;
    let survivors: Vec<String> = store
        .pool_members(&a.instance)
        .await?
        .into_iter()
        .map(|m| m.id)
        .collect();
    let killed: Vec<_> = (0..3)
        .map(|_| {
            let request = a
                .http
                .post(a.u("/v1/sandboxes"))
                .bearer_auth(ADMIN_KEY)
                .json(&json!({"env": {"KILLED": "1"}}));
            tokio::spawn(request.send())
        })
        .collect();
    a.wait_for("creates under way", Duration::from_secs(60), async || {
        store
            .list_sandboxes(&SandboxFilter {
                instance: Some(a.instance.clone()),
                status: Some(orchestrator::db::SandboxStatus::Creating),
                ..Default::default()
            })
            .await
            .is_ok_and(|rows| !rows.is_empty())
    })
    .await?;
    a.kill9();
    for request in killed {
        // Cut off with the process (or answered, for one that was ready just before).
        let _ = request.await;
    }
    wait_agreed(&store, &b, "after a replica was killed mid-create").await?;
    // Well past three heartbeats (2 s each here) after the kill.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let members: Vec<String> = store
        .pool_members(&b.instance)
        .await?
        .into_iter()
        .map(|m| m.id)
        .collect();
    for id in &survivors {
        ensure!(
            members.contains(id),
            "pool member {id} did not survive its replica's death: {members:?}\n{}",
            b.log_tail(30)
        );
    }
    // What is left is whole (a create that finished just before the kill): the survivor
    // deletes it like any other.
    for row in store
        .list_sandboxes(&SandboxFilter {
            instance: Some(b.instance.clone()),
            ..Default::default()
        })
        .await?
    {
        assert_eq!(
            row.status,
            orchestrator::db::SandboxStatus::Ready,
            "{row:?}"
        );
        assert_eq!(b.delete(&row.id).await?, 204);
    }
    wait_agreed(&store, &b, "after the survivor's deletes").await?;
    // The survivor keeps serving (and refilling) alone.
    let after = b.create(json!({})).await?;
    let after_id = after["id"].as_str().context("id")?;
    assert_eq!(b.delete(after_id).await?, 204);
    Ok(())
}
