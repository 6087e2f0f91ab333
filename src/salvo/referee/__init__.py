"""The MQTT service: every arena on one loop thread, the journal-publish-acknowledge batch,
admission, flood control, leases, start-up and stop."""
