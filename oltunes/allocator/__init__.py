"""The cluster's allocator: leases on devices and the queue of jobs waiting for one.

``book`` (`LeaseBook`: who holds which slot, who waits), ``queue`` (the queue's order, arrival by default),
``store`` (the book's durable file), ``types`` (leases and requests), ``api`` (HTTP routes and the remote client),
``holder`` (holding a lease for a job's life). docs/tuning-service.md has the routes.
"""
