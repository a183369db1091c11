"""The dream pass: sense the backlog, let the drives decide, run the jobs, record it."""
