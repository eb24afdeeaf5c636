"""The actions a cycle runs over its session, one idea per module.

``order``      which job is tried next (a :class:`~fairgpu.engine.actions.order.QueueOrder`:
               fair share or kube-scheduler's priority order);
``admit``      quota, namespace-cap and validity checks before a job is tried;
``allocate``   place a job -- one pod is a gang of one -- through a statement, preempting when
               the victim policy allows;
``preempt``    victim policies (who may be evicted, the preemption gate);
``reclaim``    the rule for taking resources back between queues;
``reserve``    starvation reservations and backfill around them;
``gang_timeout`` release pod groups that ran below minMember too long.

:mod:`fairgpu.engine.orderings` wires them into the two cycles (``fair``, ``kube-default``).
"""
