"""Schedules' pure time rules (issue 25): cron expressions on a zone's wall clock."""
