"""The one object the entry points hold: the use cases joined. Decisions come from `lifecycle`; I/O
from the ports; each use case lives in its own module (send, notify, reconcile, review, sweep,
health, over jobs.py's shared record writes).

Invariants kept here:
- the MIME is built and checked before a job is claimed: a message that cannot be built is a 400,
  never a claimed job that fails on every try;
- a send goes out only after a compare-and-set put the job in `sending` under our lease;
- a resend of a job whose earlier attempt may have landed happens only after a mailbox
  check found nothing and the index-lag window has passed (see lifecycle.apply_mailbox_check);
- a job that ends `sent` while more than one attempt may have landed is verified later
  (lifecycle.apply_verification): a second copy always reaches a human;
- an outcome we observed is never dropped: a lost compare-and-set is re-read and re-applied;
- once a job is claimed, a store outage never turns into "nothing was sent": the caller gets
  the last known state (202) and the sweeper reconciles from the mailbox.
"""

from __future__ import annotations

from .health import HealthViews
from .review import ReviewDecisions
from .sweep import Sweeper


class SafeSendService(Sweeper, ReviewDecisions, HealthViews):
    """The send, reconcile, sweep and review use cases over the ports. Its knobs come whole from
    Settings (one declaration each, config.py); what is injected separately is what a test or the
    local stack replaces: the adapters, the clock, sleep, randomness and owner ids."""
