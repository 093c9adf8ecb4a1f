"""The admin and concurrency limits: an execution's page names its key and links to the key's
executions; the list finds them by the key."""

from urllib.parse import unquote

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from tests import concurrency_workflows  # noqa: F401  (registers the cc_ workflows)
from workflows_app import services


def test_the_page_links_to_the_executions_of_its_key_and_the_list_finds_them(client, db):
    acme = [services.start("cc_per_customer", {"customer": "acme"}) for _ in range(3)]
    other = services.start("cc_per_customer", {"customer": "globex"})
    plain = services.start("demo")
    user = get_user_model().objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="workflows_app",
                                                     codename="view_execution"))
    client.force_login(user)

    html = client.get(reverse("admin:workflows_app_execution_change", args=[acme[2].pk])).content.decode()
    assert 'id="sy-concurrency-key"' in html and "cc_per_customer:customer=&quot;acme&quot;" in html
    assert 'id="sy-concurrency-key"' not in client.get(
        reverse("admin:workflows_app_execution_change", args=[plain.pk])).content.decode()

    changelist = reverse("admin:workflows_app_execution_changelist")
    link = unquote(html.split('id="sy-concurrency-key"><a href="')[1].split('"')[0]).replace("&amp;", "&")
    listed = client.get(link)
    assert listed.status_code == 200 and link.startswith(changelist)
    rows = {str(e.pk)[:8] for e in acme}
    assert all(row in listed.content.decode() for row in rows) and str(other.pk)[:8] not in listed.content.decode()
    searched = client.get(changelist, {"q": 'cc_per_customer:customer="globex"'}).content.decode()
    assert str(other.pk)[:8] in searched and not any(row in searched for row in rows)
