"""The channel's whole method surface: each method a client may send on an open channel,
and the function that handles it.

Not here, because something else takes them before the channel looks at this table:
basic.publish (its content frames follow, so the channel's assembler takes it and
publishing.py handles the assembled message), and channel.open, channel.close and
channel.close-ok (they make and unmake channels: the connection's channel table,
session/routing.py). A method in none of these places is refused with 503.

The handlers only name Channel in annotations, so they import it for type checking
only: this module imports them, the channel imports this module, and nothing comes
back round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from pamqp import commands

from kanin.core import handlers_basic as basic
from kanin.core import handlers_topology as topology

if TYPE_CHECKING:
    from kanin.core.channel import Channel

Handler = Callable[["Channel", Any], None]

HANDLERS: Final[dict[type, Handler]] = {
    commands.Channel.Flow: basic.channel_flow,
    commands.Exchange.Declare: topology.exchange_declare,
    commands.Exchange.Delete: topology.exchange_delete,
    commands.Exchange.Bind: topology.exchange_bind,
    commands.Exchange.Unbind: topology.exchange_bind,
    commands.Queue.Declare: topology.queue_declare,
    commands.Queue.Bind: topology.queue_bind,
    commands.Queue.Unbind: topology.queue_bind,
    commands.Queue.Purge: topology.queue_purge,
    commands.Queue.Delete: topology.queue_delete,
    commands.Basic.Qos: basic.basic_qos,
    commands.Basic.Consume: basic.basic_consume,
    commands.Basic.Cancel: basic.basic_cancel,
    commands.Basic.Get: basic.basic_get,
    commands.Basic.Ack: basic.basic_ack,
    commands.Basic.Nack: basic.basic_nack,
    commands.Basic.Reject: basic.basic_reject,
    commands.Basic.Recover: basic.basic_recover,
    commands.Basic.RecoverAsync: basic.basic_recover,
    commands.Confirm.Select: basic.confirm_select,
    commands.Tx.Select: basic.tx_select,
    commands.Tx.Commit: basic.tx_commit,
    commands.Tx.Rollback: basic.tx_rollback,
}
