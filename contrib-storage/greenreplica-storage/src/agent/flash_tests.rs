//! The agent's flash pools: opened at start, listed in the status, and `release_flash`
//! (root only, by pool and volume name) refusing hostile or mistaken requests.

use super::*;
use crate::users::Peer;

fn peer(uid: u32) -> Peer {
    Peer {
        pid: 1,
        uid,
        gid: uid,
        groups: Vec::new(),
    }
}

#[test]
fn release_flash_is_for_root_and_names_what_is_wrong() {
    let dir = std::env::temp_dir().join(format!("grs-agent-flash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!(
        "[agent]\nsocket = \"{d}/control.sock\"\nstate_dir = \"{d}/state\"\n\
         runtime_dir = \"{d}/run\"\n[[flash]]\nname = \"fast\"\nkind = \"file\"\n\
         path = \"{d}/flash.img\"\nsize = \"24MiB\"\n",
        d = dir.display()
    );
    let config = Config::parse(&text, "test.toml").unwrap();
    std::fs::create_dir_all(&config.agent.state_dir).unwrap();
    // A volume that once held extents and is no longer configured.
    {
        let pool = open_pool(&config.flash[0], &config.agent.state_dir).unwrap();
        pool.attach("gone").unwrap();
        pool.take("gone").unwrap().unwrap();
    }
    let agent = Agent::new(config);
    agent.start_configured().unwrap();
    let status = agent.dispatch(Request::Status, &peer(0)).unwrap();
    assert_eq!(status["flash"][0]["name"], "fast");
    assert_eq!(status["flash"][0]["volumes"][0]["volume"], "gone");
    assert_eq!(status["flash"][0]["volumes"][0]["assembled"], false);
    let release = |uid, flash: &str, volume: &str| {
        agent
            .dispatch(
                Request::ReleaseFlash {
                    flash: flash.into(),
                    volume: volume.into(),
                },
                &peer(uid),
            )
            .map_err(|e| format!("{e:#}"))
    };
    let e = release(1000, "fast", "gone").unwrap_err();
    assert!(e.contains("for root"), "{e}");
    let e = release(0, "slow", "gone").unwrap_err();
    assert!(e.contains("no flash pool named \"slow\""), "{e}");
    let e = release(0, "fast", "../../etc").unwrap_err();
    assert!(e.contains("holds nothing"), "{e}");
    let e = release(0, "fast", "").unwrap_err();
    assert!(e.contains("empty"), "{e}");
    let ok = release(0, "fast", "gone").unwrap();
    assert_eq!(ok["released_extents"], 1);
    assert_eq!(ok["flash"]["volumes"].as_array().unwrap().len(), 0);
    drop(agent);
    std::fs::remove_dir_all(dir).unwrap();
}
