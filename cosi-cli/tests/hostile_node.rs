//! What a hostile or broken node sends cannot take over the operator's terminal: control
//! characters in ids, values, messages and error texts reach the output escaped (`\u{1b}`),
//! never raw. (`logs` prints a service's raw output on purpose and is not covered here.)

mod support;

use std::time::{Duration, SystemTime};

use cosi_api::machine::{ServiceEvent, ServiceHealth, ServiceStatus};
use support::Cluster;

/// What a hostile node puts in every text it sends: a window title, a screen clear, a carriage
/// return that would overwrite the line, a C1 CSI and a newline that would forge a line.
const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\rx\u{9b}1m\nerror: forged";

/// [`HOSTILE`] as the operator must see it.
const ESCAPED: &str = "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\rx\\u{9b}1m\\nerror: forged";

/// Runs `args` through the library with the clock fixed at `now`.
async fn run_at(cluster: &Cluster, now: SystemTime, args: &[&str]) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let cli = support::cli(cluster, args);
    let code = {
        let mut io = cosi_cli::session::Io::new(&mut out, &mut err).with_clock(move || now);
        cosi_cli::run(cli, &mut io).await
    };
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_cells_from_a_node_show_control_characters_escaped() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let now = SystemTime::now();
    node.machine.services.set_service(ServiceStatus {
        id: "zz".into(),
        state: "Running".into(),
        health: ServiceHealth {
            unknown: true,
            healthy: false,
            last_message: String::new(),
            last_change: now,
        },
        events: vec![ServiceEvent {
            message: HOSTILE.into(),
            state: "Running".into(),
            time: now - Duration::from_secs(3),
        }],
    });
    let (code, out, err) = run_at(&cluster, now, &["-n", &node.name, "services"]).await;
    assert_eq!((code, err.as_str()), (0, ""));
    let last = out.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "{}   zz        Running   ?        3s ago        {ESCAPED}",
            node.name
        )
    );
    assert_eq!(out.lines().count(), 4);
}
