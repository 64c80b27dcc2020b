module servo-actors.local/pause

go 1.26
